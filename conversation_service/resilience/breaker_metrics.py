"""The circuit breaker's state and failure count, read at scrape time: how full its sliding window is
only exists inside the breaker, and no gauge could follow every expiry of an old failure."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from shared.breaker import BreakerState, CircuitBreaker

_STATE_VALUE = {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}


class BreakerCollector(Collector):
    def __init__(self, breaker: CircuitBreaker) -> None:
        self._breaker = breaker

    def collect(self) -> Iterator[GaugeMetricFamily]:
        # Read now: OPEN turns HALF_OPEN by the passing of time, with no call to record it.
        yield GaugeMetricFamily(
            "conversation_agent_breaker_state", "Circuit breaker state: 0 closed, 1 half-open, 2 open",
            value=_STATE_VALUE[self._breaker.state],
        )
        yield GaugeMetricFamily(
            "conversation_agent_breaker_recent_failures",
            "Agent Service failures inside the breaker's window (it opens when this reaches the threshold)",
            value=self._breaker.recent_failures,
        )
        yield GaugeMetricFamily(
            "conversation_agent_breaker_failure_threshold",
            "Failures inside the window that open the breaker",
            value=self._breaker.failure_threshold,
        )


class A2AAgentBreakersCollector(Collector):
    """The same for each A2A agent's breaker (``A2A_AGENTS``), labelled by the agent's name. With no A2A
    agent configured the families are still named, with no series."""

    def __init__(self, breakers: Mapping[str, CircuitBreaker]) -> None:
        self._breakers = breakers

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = GaugeMetricFamily(
            "conversation_a2a_agent_breaker_state", "An A2A agent's circuit breaker: 0 closed, 1 half-open, 2 open",
            labels=["agent"],
        )
        failures = GaugeMetricFamily(
            "conversation_a2a_agent_breaker_recent_failures",
            "An A2A agent's failures inside its breaker's window (it opens when this reaches the threshold)",
            labels=["agent"],
        )
        for name, breaker in sorted(self._breakers.items()):
            state.add_metric([name], _STATE_VALUE[breaker.state])
            failures.add_metric([name], breaker.recent_failures)
        yield state
        yield failures
