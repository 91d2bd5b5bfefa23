from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from shared.labelled import Labelled


def test_each_label_value_is_one_child_that_counts_into_the_metric() -> None:
    registry = CollectorRegistry()
    counter = Counter("frames_total", "frames", ["type"], registry=registry)
    by_type: Labelled = Labelled(counter, "type")
    assert by_type["delta"] is by_type["delta"]
    by_type["delta"].inc()
    by_type["delta"].inc()
    by_type["created"].inc()
    assert registry.get_sample_value("frames_total", {"type": "delta"}) == 2
    assert registry.get_sample_value("frames_total", {"type": "created"}) == 1
