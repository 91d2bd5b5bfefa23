"""``TracingMiddleware``: the server span of each HTTP request, and of each WebSocket's handshake.

Added by ``create_app`` only when tracing is configured; it finds the process's ``Tracing`` on
``app.state.tracing`` (made in the lifespan) and passes requests through until then.

- HTTP: one SERVER span per request, named ``{method} {route template}``, current while the app runs
  (the request's logs, queries and outbound calls are its children). A caller's ``traceparent`` is
  its parent when the service trusts its callers' contexts (the Agent Service: its callers are
  services), else only a link. Probes (``/health``, ``/ready``, ``/metrics``) make no span.
- A streamed response (SSE) is that one span, with the number of body messages it sent and the
  time of the first: its body messages are counted, not traced. With the fast path's direct body
  send (``shared.fastpath.direct_body``), the counter replaces the recorded send; either way this
  middleware acts on the start message only.
- WebSocket: a span for the handshake, ended once the socket is accepted or refused; the
  connection's messages are traces of their own that link to it (``connection_link``), so a
  connection open for hours is not one trace.
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared.http_metrics import route_template
from shared.logging import PROBE_PATHS

__all__ = ["TracingMiddleware", "connection_link"]

_DIRECT_SEND = "taskforce.direct_body_send"  # shared.fastpath.direct_body's scope key
_CONNECTION = "taskforce.trace.connection"


def connection_link(scope: Scope) -> list[Link]:
    """A link to the WebSocket handshake's span, for the traces of the connection's messages."""
    found = scope.get(_CONNECTION)
    return [Link(found)] if found is not None else []


def _headers(scope: Scope) -> dict[str, str]:
    return {name.decode("latin-1"): value.decode("latin-1") for name, value in scope.get("headers", ())
            if name in (b"traceparent", b"tracestate")}


class _BodyCount:
    """Counts a response's body messages and times the first, on the send that carries them."""

    __slots__ = ("count", "first_at", "send")

    def __init__(self, send: Send) -> None:
        self.send = send
        self.count = 0
        self.first_at: float | None = None

    async def __call__(self, message: Message) -> None:
        if message.get("body"):
            if self.first_at is None:
                self.first_at = time.perf_counter()
            self.count += 1
        await self.send(message)


class TracingMiddleware:
    # It counts body messages by replacing the send recorded by shared.fastpath.direct_body with a counter of
    # its own (only when tracing is on), so streamed bodies still skip every wrapper.
    START_ONLY = True

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        tracing = getattr(scope["app"].state, "tracing", None) if "app" in scope else None
        if tracing is None or not tracing.enabled or scope["type"] not in ("http", "websocket") or (
                scope["path"] in PROBE_PATHS):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await self._websocket(tracing, scope, receive, send)
            return
        await self._http(tracing, scope, receive, send)

    def _parent(self, tracing: Any, scope: Scope) -> tuple[otel_context.Context | None, list[Link]]:
        headers = _headers(scope)
        if not headers:
            return None, []
        extracted = tracing.extract(headers)
        caller = trace.get_current_span(extracted).get_span_context()
        if not caller.is_valid:
            return None, []
        if tracing.trust_client_context:
            return extracted, []
        return otel_context.Context(), [Link(caller)]

    async def _http(self, tracing: Any, scope: Scope, receive: Receive, send: Send) -> None:
        parent, links = self._parent(tracing, scope)
        method = scope["method"]
        span = tracing.tracer.start_span(method, context=parent, kind=SpanKind.SERVER, links=links, attributes={
            "http.request.method": method, "url.path": scope["path"], "url.scheme": scope.get("scheme", "http"),
        })
        started = time.perf_counter()
        body = _BodyCount(send)
        direct = scope.get(_DIRECT_SEND)
        if direct is not None:
            scope[_DIRECT_SEND] = _BodyCount(direct)

        async def send_start(message: Message) -> None:
            if message["type"] == "http.response.start":
                status = message["status"]
                span.set_attribute("http.response.status_code", status)
                if status >= 500:
                    span.set_status(Status(StatusCode.ERROR))
            await body(message)

        token = otel_context.attach(trace.set_span_in_context(span, parent))
        try:
            await self.app(scope, receive, send_start)
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise
        finally:
            otel_context.detach(token)
            _finish(span, scope, method, started, body, scope.get(_DIRECT_SEND) if direct is not None else None)

    async def _websocket(self, tracing: Any, scope: Scope, receive: Receive, send: Send) -> None:
        parent, links = self._parent(tracing, scope)
        span = tracing.tracer.start_span("WS", context=parent, kind=SpanKind.SERVER, links=links,
                                         attributes={"url.path": scope["path"], "url.scheme": scope.get("scheme", "ws")})
        scope[_CONNECTION] = span.get_span_context()
        open_ = True

        async def send_until_accepted(message: Message) -> None:
            nonlocal open_
            if open_ and message["type"] in ("websocket.accept", "websocket.close", "websocket.http.response.start"):
                open_ = False
                span.set_attribute("taskforce.websocket.outcome", message["type"].rsplit(".", 1)[-1])
                span.update_name(f"WS {route_template(scope)}")
                span.end()
            await send(message)

        try:
            await self.app(scope, receive, send_until_accepted)
        finally:
            if open_:
                span.end()


def _finish(span: Any, scope: Scope, method: str, started: float, body: _BodyCount, direct: Any) -> None:
    route = route_template(scope)
    span.update_name(f"{method} {route}")
    span.set_attribute("http.route", route)
    count = body.count + (direct.count if isinstance(direct, _BodyCount) else 0)
    first = [c.first_at for c in (body, direct) if isinstance(c, _BodyCount) and c.first_at is not None]
    if count > 1:  # a stream: how many messages, and when the first went out
        span.set_attribute("taskforce.stream.events", count)
    if first:
        span.set_attribute("taskforce.stream.first_event_ms", round((min(first) - started) * 1000, 3))
    span.end()
