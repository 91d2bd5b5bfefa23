"""What ``GET /metrics`` answers: the app's own registry, or, under ``--workers N``
(``PROMETHEUS_MULTIPROC_DIR`` set by ``shared.workers``), the sum over every worker of the service,
read from the files each worker's metrics write there."""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector


def render_metrics(registry: CollectorRegistry) -> bytes:
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        return generate_latest(registry)
    # Counters and histograms are summed; gauges show one series per worker (a ``pid`` label).
    merged = CollectorRegistry()
    MultiProcessCollector(merged, path=directory)
    return generate_latest(merged)
