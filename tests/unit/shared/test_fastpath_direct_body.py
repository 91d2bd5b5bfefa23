"""``direct_body`` on a real uvicorn server: a streamed body skips the start-only middlewares and
arrives whole, the start message still gets every middleware's header and the metrics count it,
and a middleware that is not start-only turns the shortcut off."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI
from prometheus_client import CollectorRegistry, generate_latest
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from shared.body_limit import BodySizeLimitMiddleware
from shared.fastpath.direct_body import DirectBodyMiddleware, body_send
from shared.http_metrics import HttpMetricsMiddleware, install_http_metrics
from shared.logging import RequestIdMiddleware
from tests.support.servers import serve_app

CHUNKS = [b"data: %d\n\n" % i for i in range(50)]


class _Streamed:
    """A response that streams its body as the SSE response does, recording which send it used."""

    def __init__(self, seen: list[bool]) -> None:
        self.seen = seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        send_body = body_send(scope, send)
        self.seen.append(send_body is not send)
        for chunk in CHUNKS:
            await send_body({"type": "http.response.body", "body": chunk, "more_body": True})
        await send_body({"type": "http.response.body", "body": b"", "more_body": False})


class _CountBodies:
    """An inner middleware that would see body messages: it counts them (as a compressor would read them)."""

    def __init__(self, app, counts: list[int]) -> None:
        self.app = app
        self.counts = counts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def counting(message: Message) -> None:
            if message["type"] == "http.response.body":
                self.counts.append(1)
            await send(message)

        await self.app(scope, receive, counting)


def _app(registry: CollectorRegistry, seen: list[bool], extra: list | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        install_http_metrics(app, registry)
        yield

    app = FastAPI(lifespan=lifespan)

    # An ASGI app as the endpoint (the metrics see no route template for it: "unmatched").
    app.router.routes.append(Route("/stream", _Streamed(seen)))

    for cls, kwargs in extra or []:
        app.add_middleware(cls, **kwargs)
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=1000)
    app.add_middleware(RequestIdMiddleware)
    app.add_middleware(HttpMetricsMiddleware)
    app.add_middleware(DirectBodyMiddleware)
    return app


async def _get(url: str) -> httpx.Response:
    async with httpx.AsyncClient() as client:
        return await client.get(f"{url}/stream", headers={"X-Request-ID": "req-1"})


async def test_a_streamed_body_skips_start_only_middlewares_and_keeps_their_effects() -> None:
    registry, seen = CollectorRegistry(), []
    async with serve_app(_app(registry, seen)) as url:
        response = await _get(url)
    assert seen == [True]
    assert response.status_code == 200
    assert response.content == b"".join(CHUNKS)
    assert response.headers["x-request-id"] == "req-1"
    exported = generate_latest(registry).decode()
    assert 'http_requests_total{method="GET",route="unmatched",status="200"} 1.0' in exported


async def test_a_middleware_that_is_not_start_only_turns_the_shortcut_off() -> None:
    registry, seen, counts = CollectorRegistry(), [], []
    async with serve_app(_app(registry, seen, [(_CountBodies, {"counts": counts})])) as url:
        response = await _get(url)
    assert seen == [False]
    assert response.content == b"".join(CHUNKS)
    assert len(counts) == len(CHUNKS) + 1  # every body message went through it

