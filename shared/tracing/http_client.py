"""``TracedTransport``: a CLIENT span and a W3C ``traceparent`` on each outbound request of one client.

The clients are instrumented themselves, by wrapping their transport: the global httpx
instrumentation patches httpx's own transports and never sees ``AiohttpTransport``
(``shared.fastpath.aiohttp_transport``), which both the Agent Service client and the model
provider read their streams through. The span lasts until the answer's headers; the streamed body
belongs to the span of whoever reads it (the model call, the agent stream). Outside a span that
records (health polls, background work) a request goes out as it is, with no span and no header.
"""

from __future__ import annotations

import httpx
from opentelemetry.trace import SpanKind, Status, StatusCode

from shared.tracing.core import Tracing, TracingOff, recording

__all__ = ["TracedTransport", "traced_transport"]


def traced_transport(tracing: Tracing | TracingOff, inner: httpx.AsyncBaseTransport) -> httpx.AsyncBaseTransport:
    """``inner`` traced and propagating when tracing is on; ``inner`` itself when off."""
    return TracedTransport(inner, tracing) if isinstance(tracing, Tracing) else inner


class TracedTransport(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport, tracing: Tracing) -> None:
        self.inner = inner
        self._tracer = tracing.tracer

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not recording():
            return await self.inner.handle_async_request(request)
        url = request.url
        with self._tracer.start_as_current_span(request.method, kind=SpanKind.CLIENT, attributes={
            "http.request.method": request.method, "server.address": url.host,
            "server.port": url.port or (443 if url.scheme == "https" else 80), "url.full": str(url.copy_with(query=None)),
        }, record_exception=True, set_status_on_exception=True) as span:
            Tracing.inject(request.headers, span)
            response = await self.inner.handle_async_request(request)
            span.set_attribute("http.response.status_code", response.status_code)
            if response.status_code >= 400:
                span.set_status(Status(StatusCode.ERROR))
            return response

    async def aclose(self) -> None:
        await self.inner.aclose()
