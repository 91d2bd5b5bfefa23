"""``StoppableExporter``: the span exporter, which the shutdown can make give up.

The OTLP exporter retries a failed export with back-off until its timeout (``OTEL_EXPORTER_OTLP_TIMEOUT``,
10 s by default), and the SDK's shutdown waits for it: with the trace backend down, a SIGTERM took 7 s
of the drain's grace. ``stop`` (called by ``Tracing.aclose`` once its short try is over) ends an export
under way (the exporter's shutdown wakes its back-off) and drops every later one at once, quietly: the
SDK's own exporter logs a warning for each batch it refuses after shutdown.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = ["StoppableExporter"]


class StoppableExporter(SpanExporter):
    def __init__(self, inner: SpanExporter) -> None:
        self._inner = inner
        self._stopped = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._stopped:
            return SpanExportResult.FAILURE
        return self._inner.export(spans)

    def stop(self) -> None:
        """Give up: the export under way returns, later ones fail at once. Safe from any thread, twice."""
        if not self._stopped:
            self._stopped = True
            self._inner.shutdown()

    def shutdown(self) -> None:
        self.stop()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)
