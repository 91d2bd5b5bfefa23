"""``trace_id`` and ``span_id`` on every JSON log line written inside a span (``install_log_ids``).

A filter on the root handler, added only when tracing is on: a line of a traced request, turn or
run then names the trace to open (docs/operations.md, "From a log line to its trace").
"""

from __future__ import annotations

import logging

from opentelemetry import trace

__all__ = ["TraceIdsFilter", "install_log_ids"]


class TraceIdsFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            record.trace_id = trace.format_trace_id(context.trace_id)
            record.span_id = trace.format_span_id(context.span_id)
        return True


def install_log_ids() -> None:
    """On every handler of the root logger, once (a process may build several apps)."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, TraceIdsFilter) for f in handler.filters):
            handler.addFilter(TraceIdsFilter())
