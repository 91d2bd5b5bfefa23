"""HTTP request count and latency for either service, on the app's own Prometheus registry.

``route`` is the route template, never the raw path, so the number of series stays bounded whatever
ids clients send. The duration runs until the response headers are sent: for a stream (SSE) that is
the time to its start, the latency a caller feels, not the run's length.

The registry is made in the lifespan, after the middleware stack, so ``install_http_metrics`` puts
the metrics on ``app.state``; until then the middleware only passes requests through.
"""

from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

STATE_ATTRIBUTE = "http_metrics"
UNMATCHED_ROUTE = "unmatched"
CLIENT_CLOSED_REQUEST = 499
# Any other verb is folded into one label value: clients choose the method, and labels must stay bounded.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# 5 s is a bucket bound because the high-latency alert fires on p95 > 5 s.
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class HttpMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "http_requests_total", "HTTP requests answered, by method, route template and status code",
            ["method", "route", "status"], registry=registry,
        )
        self.duration = Histogram(
            "http_request_duration_seconds",
            "From request received to response headers sent (streams: to the stream's start)",
            ["method", "route"], buckets=_BUCKETS, registry=registry,
        )

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.duration.labels(method, route).observe(seconds)


def install_http_metrics(app: object, registry: CollectorRegistry) -> HttpMetrics:
    """Create the HTTP metrics on ``registry`` and make them visible to ``HttpMetricsMiddleware``."""
    metrics = HttpMetrics(registry)
    setattr(app.state, STATE_ATTRIBUTE, metrics)  # type: ignore[attr-defined]
    return metrics


def route_template(scope: Scope) -> str:
    route = scope.get("route")
    if route is None:
        return UNMATCHED_ROUTE
    # Route.path_format is the template without converters ("/items/{id}"); a Mount's is "/ui/{path}".
    return getattr(route, "path_format", None) or getattr(route, "path", None) or UNMATCHED_ROUTE


class HttpMetricsMiddleware:
    # Its send wrapper acts on http.response.start only: streamed bodies may skip it (shared.fastpath.direct_body).
    START_ONLY = True

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        metrics: HttpMetrics | None = None
        if scope["type"] == "http" and "app" in scope:
            metrics = getattr(scope["app"].state, STATE_ATTRIBUTE, None)
        if metrics is None:
            await self.app(scope, receive, send)
            return

        method = scope["method"] if scope["method"] in _METHODS else "OTHER"
        started = time.perf_counter()
        recorded = False

        def record(status: int) -> None:
            nonlocal recorded
            if not recorded:
                recorded = True
                # The router wrote the matched route into this same scope on its way in.
                metrics.observe(method, route_template(scope), status, time.perf_counter() - started)

        async def send_and_measure(message: Message) -> None:
            if message["type"] == "http.response.start":
                record(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_measure)
        except asyncio.CancelledError:
            # The client went away before an answer; 499 (as nginx logs it) keeps these out of 5xx.
            record(CLIENT_CLOSED_REQUEST)
            raise
        except Exception:
            record(500)  # what the server answers for an unhandled exception
            raise
