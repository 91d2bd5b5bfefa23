"""Calling the hooks, isolated from the run.

A hook that raises or takes longer than the timeout is logged and counted
(``agent_hook_failures{hook,point,reason}``) and skipped: the run goes on as if it had not been
called, with what it changed before failing undone. A hook that blocks the event loop without
awaiting cannot be interrupted; hooks must do their slow work in a thread.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from agent_service.hooks.base import Hook, HookData, HookPoint
from agent_service.metrics import AgentMetrics

log = logging.getLogger(__name__)


class HookRunner:
    def __init__(self, hooks: Sequence[Hook], *, timeout_s: float, metrics: AgentMetrics) -> None:
        self.hooks = list(hooks)
        self.timeout_s = timeout_s
        self._metrics = metrics
        self._by_point = {point: [h for h in self.hooks if h.implements(point)] for point in HookPoint}

    def wants(self, point: HookPoint) -> bool:
        """Whether any hook listens at ``point``: callers skip building its data when none does."""
        return bool(self._by_point[point])

    async def call(self, point: HookPoint, data: HookData) -> None:
        for hook in self._by_point[point]:
            saved = _fields_of(data)
            try:
                async with asyncio.timeout(self.timeout_s):
                    await getattr(hook, point.value)(data)
                continue
            except TimeoutError:
                reason = "timeout"
                log.warning(
                    "hook took too long and was skipped",
                    extra={"hook": hook.name, "point": point.value, "timeout_s": self.timeout_s},
                )
            except Exception:
                reason = "error"
                log.exception("hook failed and was skipped", extra={"hook": hook.name, "point": point.value})
            for name, value in saved.items():
                setattr(data, name, value)
            self._metrics.hook_failures.labels(hook.name, point.value, reason).inc()

    async def aclose(self) -> None:
        for hook in self.hooks:
            try:
                await hook.aclose()
            except Exception:
                log.exception("hook failed to close", extra={"hook": hook.name})


def _fields_of(data: HookData) -> dict[str, Any]:
    """The data's fields, lists and dicts copied, so a failed hook's changes can be undone."""
    return {f.name: copy.copy(getattr(data, f.name)) for f in fields(data)}


NO_HOOKS_TIMEOUT_S = 1.0


def no_hooks(metrics: AgentMetrics) -> HookRunner:
    return HookRunner((), timeout_s=NO_HOOKS_TIMEOUT_S, metrics=metrics)
