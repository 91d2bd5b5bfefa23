"""The per-event metrics: counted without locks, exposed exactly as prometheus_client's own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from agent_service.metrics import AgentMetrics
from shared.protocol import EventType

OBSERVED = (0.00004, 0.00005, 0.00007, 0.0003, 0.001, 0.0011, 2.0, 0.0)


def _samples(registry: CollectorRegistry) -> list[str]:
    return [line for line in generate_latest(registry).decode().splitlines() if "_created" not in line]


def test_overhead_histogram_exposes_what_a_prometheus_histogram_would() -> None:
    metrics = AgentMetrics()
    reference = CollectorRegistry()
    histogram = Histogram(
        "agent_event_overhead_seconds",
        "From a model chunk received (its deltas coalesced) to its SSE bytes written to a live stream "
        "(non-terminal events)",
        buckets=metrics.event_overhead._bounds, registry=reference,
    )
    for value in OBSERVED:
        metrics.event_overhead.observe(value)
        histogram.observe(value)
    ours = [line for line in _samples(metrics.registry) if "agent_event_overhead_seconds" in line]
    assert ours == _samples(reference)
    assert metrics.registry.get_sample_value("agent_event_overhead_seconds_count") == len(OBSERVED)


def test_event_counter_exposes_what_a_prometheus_counter_would() -> None:
    metrics = AgentMetrics()
    reference = CollectorRegistry()
    counter = Counter("agent_events", "Events emitted, by type", ["type"], registry=reference)
    for type_ in (EventType.ANSWER_CHUNK, EventType.ANSWER_CHUNK, EventType.COMPLETE):
        metrics.events.inc(type_)
        counter.labels(type=type_).inc()
    ours = [line for line in _samples(metrics.registry) if "agent_events" in line]
    assert ours == _samples(reference)
    assert metrics.registry.get_sample_value("agent_events_total", {"type": "ANSWER_CHUNK"}) == 2
