"""The Agent Service's health as the ConversationService sees it, for ``GET /health``.

Cached for a few seconds so a load balancer polling our /health does not turn into a stream of
calls to the Agent Service.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from conversation_service.agent_client import AgentServiceClient, AgentServiceError
from conversation_service.agent_delegation.breaker import CircuitBreaker
from conversation_service.metrics import AgentMetrics


class AgentHealthMonitor:
    def __init__(self, client: AgentServiceClient, breaker: CircuitBreaker, metrics: AgentMetrics,
                 *, cache_s: float) -> None:
        self._client = client
        self._breaker = breaker
        self._metrics = metrics
        self._cache_s = cache_s
        self._checked_at = float("-inf")
        self._last: str = "unknown"
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self, interval_s: float) -> None:
        """Check in the background too, so ``conversation_agent_service_up`` is current even when
        nobody polls /health."""
        self._task = asyncio.create_task(self._loop(interval_s), name="agent-health")

    async def _loop(self, interval_s: float) -> None:
        while not self._stop.is_set():
            await self.check()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=interval_s)

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def check(self) -> dict:
        now = time.monotonic()
        if now - self._checked_at >= self._cache_s:
            try:
                body = await self._client.health()
                self._last = "ok" if body.get("status") == "ok" else "degraded"
            except AgentServiceError:
                self._last = "unavailable"
            self._checked_at = now
            self._metrics.service_up.set(1 if self._last == "ok" else 0)
        state = self._breaker.state
        return {"status": self._last, "breaker": state.value, "recent_failures": self._breaker.recent_failures}
