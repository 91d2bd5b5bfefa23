"""A span per SQL statement, from SQLAlchemy's engine events: ``trace_engine(engine, tracing)``.

Hand-made because the SQLAlchemy instrumentation declares SQLAlchemy < 2.1 and, on 2.1, silently
instruments nothing. Statements made outside a span that records (the group commits, lease
renewals and sweeps of background loops) make no span. The statement's text is recorded with its
placeholders, never its parameters: the values are users' data.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.trace import SpanKind, Status, StatusCode
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.tracing.core import Tracing, TracingOff, recording

__all__ = ["trace_engine"]

_SPAN = "_taskforce_span"
_SYSTEMS = {"postgresql": "postgresql", "sqlite": "sqlite"}
_MAX_QUERY_CHARS = 2000


def trace_engine(engine: AsyncEngine, tracing: Tracing | TracingOff) -> None:
    """A span per statement of ``engine`` made under a span that records; nothing when tracing is off."""
    if not isinstance(tracing, Tracing):
        return
    sync_engine = engine.sync_engine
    url = sync_engine.url
    system = _SYSTEMS.get(url.get_backend_name(), url.get_backend_name())
    common = {"db.system.name": system, "db.namespace": url.database or ""}
    if url.host:
        common["server.address"] = url.host
    tracer = tracing.tracer

    def before(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        if context is None or not recording():
            return
        operation = statement.lstrip().split(None, 1)[0].upper() if statement.strip() else "SQL"
        span = tracer.start_span(operation, kind=SpanKind.CLIENT, attributes={
            **common, "db.operation.name": operation, "db.query.text": statement[:_MAX_QUERY_CHARS],
        })
        setattr(context, _SPAN, span)

    def after(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        span = getattr(context, _SPAN, None)
        if span is not None:
            setattr(context, _SPAN, None)
            span.end()

    def failed(exception_context: Any) -> None:
        context = exception_context.execution_context
        span = getattr(context, _SPAN, None) if context is not None else None
        if span is not None:
            setattr(context, _SPAN, None)
            error = exception_context.original_exception
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            span.set_attribute("error.type", type(error).__name__)
            span.end()

    event.listen(sync_engine, "before_cursor_execute", before)
    event.listen(sync_engine, "after_cursor_execute", after)
    event.listen(sync_engine, "handle_error", failed)

