"""The breaker's failure count is read at scrape time and follows its sliding window."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from conversation_service.resilience.breaker_metrics import A2AAgentBreakersCollector, BreakerCollector
from shared.breaker import BreakerState, CircuitBreaker


def _scrape(registry: CollectorRegistry) -> dict[str, float]:
    text = generate_latest(registry).decode()
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples}


def test_failure_count_follows_the_window():
    now = [1000.0]
    breaker = CircuitBreaker(failure_threshold=3, window_seconds=60, open_seconds=30, clock=lambda: now[0])
    registry = CollectorRegistry()
    registry.register(BreakerCollector(breaker))

    assert _scrape(registry) == {
        "conversation_agent_breaker_state": 0,
        "conversation_agent_breaker_recent_failures": 0,
        "conversation_agent_breaker_failure_threshold": 3,
    }
    breaker.record_failure()
    now[0] += 10
    breaker.record_failure()
    assert _scrape(registry)["conversation_agent_breaker_recent_failures"] == 2

    now[0] += 55  # the first failure is now older than the 60 s window
    assert _scrape(registry)["conversation_agent_breaker_recent_failures"] == 1

    breaker.record_failure()
    breaker.record_failure()
    assert breaker.state is BreakerState.OPEN
    assert _scrape(registry)["conversation_agent_breaker_recent_failures"] == 3
    assert _scrape(registry)["conversation_agent_breaker_state"] == 2

    # Half-open comes with time alone: the scrape must show it without any call to the breaker.
    now[0] += 30
    assert _scrape(registry)["conversation_agent_breaker_state"] == 1


def test_each_a2a_agents_breaker_is_a_series_of_its_own():
    now = [1000.0]
    breakers = {name: CircuitBreaker(failure_threshold=2, window_seconds=60, open_seconds=30, clock=lambda: now[0])
                for name in ("research", "billing")}
    registry = CollectorRegistry()
    registry.register(A2AAgentBreakersCollector(breakers))

    breakers["research"].record_failure()
    breakers["research"].record_failure()
    text = generate_latest(registry).decode()
    series = {(s.name, s.labels["agent"]): s.value
              for family in text_string_to_metric_families(text) for s in family.samples}
    assert series == {
        ("conversation_a2a_agent_breaker_state", "billing"): 0,
        ("conversation_a2a_agent_breaker_state", "research"): 2,
        ("conversation_a2a_agent_breaker_recent_failures", "billing"): 0,
        ("conversation_a2a_agent_breaker_recent_failures", "research"): 2,
    }


def test_with_no_a2a_agent_the_families_are_named_with_no_series():
    registry = CollectorRegistry()
    registry.register(A2AAgentBreakersCollector({}))
    families = {f.name: f.samples for f in text_string_to_metric_families(generate_latest(registry).decode())}
    assert families == {"conversation_a2a_agent_breaker_state": [],
                        "conversation_a2a_agent_breaker_recent_failures": []}
