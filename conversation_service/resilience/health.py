"""The Agent Service's health for ``GET /health``, cached for a few seconds so a load balancer polling
us does not become a stream of calls to it (the lifespan also polls it, for the ``up`` gauge)."""

from __future__ import annotations

import time

from conversation_service.agent_client import AgentServiceClient, AgentServiceError
from conversation_service.metrics import AgentMetrics
from shared.breaker import CircuitBreaker


class AgentHealthMonitor:
    def __init__(self, client: AgentServiceClient, breaker: CircuitBreaker, metrics: AgentMetrics,
                 *, cache_s: float) -> None:
        self._client = client
        self._breaker = breaker
        self._metrics = metrics
        self._cache_s = cache_s
        self._checked_at = float("-inf")
        self._last: str = "unknown"

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
