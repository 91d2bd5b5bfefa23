"""``DeferredWrite``: a write a reply needs, started only once the reply's first frame is out.

A delegated reply needs its start recorded (the assistant message row, the agent session's
correlation) before it can record anything else about itself, but nothing the user sees needs it:
started at once, the transaction's CPU time on the event loop would sit between the agent's first
event and its frame on the screen. So the write is started when the first frame is out
(``frame_out``), or at the latest when something needs it done (``done``), and every later write of
the reply waits for it. A failure reaches whoever waits (each waiter sees it), and is logged once if
nobody does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["DeferredWrite"]

log = logging.getLogger(__name__)


class DeferredWrite:
    __slots__ = ("_name", "_task", "_write")

    def __init__(self, write: Callable[[], Coroutine[Any, Any, None]], *, name: str) -> None:
        self._write: Callable[[], Coroutine[Any, Any, None]] | None = write
        self._name = name
        self._task: asyncio.Task[None] | None = None

    def frame_out(self) -> None:
        """A frame of the reply is out: the write may start now (once; later calls do nothing)."""
        if self._write is not None:
            write, self._write = self._write, None
            self._task = asyncio.create_task(write(), name=self._name)
            self._task.add_done_callback(_log_unobserved)

    async def done(self) -> None:
        """Start the write if it has not started, and wait for it; raises what it raised."""
        self.frame_out()
        if self._task is not None:
            await asyncio.shield(self._task)

    async def settle(self) -> None:
        """Wait for a write already started, whatever became of it (a turn's way out)."""
        if self._task is not None:
            await asyncio.wait([self._task])


def _log_unobserved(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("a deferred write of a reply failed", exc_info=task.exception(), extra={"task": task.get_name()})
