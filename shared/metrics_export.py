"""What ``GET /metrics`` answers: the app's own registry, or, under ``--workers N``
(``PROMETHEUS_MULTIPROC_DIR`` set by ``shared.workers``), the sum over every worker of the service,
read from the files each worker's metrics write there.

In the Prometheus text format by default; in OpenMetrics when the scraper asks for it
(``Accept: application/openmetrics-text``, as Prometheus does with exemplar storage on), the format
that carries exemplars: the turn and run durations name the trace of an observation. Under
``--workers N`` prometheus_client's multiprocess mode keeps no exemplars: the sums come without them.
"""

from __future__ import annotations

import os

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.openmetrics import exposition as openmetrics


def _registry(registry: CollectorRegistry) -> CollectorRegistry:
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        return registry
    # Counters and histograms are summed; gauges show one series per worker (a ``pid`` label).
    merged = CollectorRegistry()
    MultiProcessCollector(merged, path=directory)
    return merged


def render_metrics(registry: CollectorRegistry, accept: str | None = None) -> tuple[bytes, str]:
    """The body and its content type, in the format ``accept`` prefers."""
    source = _registry(registry)
    if accept and "application/openmetrics-text" in accept:
        return openmetrics.generate_latest(source), openmetrics.CONTENT_TYPE_LATEST
    return generate_latest(source), CONTENT_TYPE_LATEST
