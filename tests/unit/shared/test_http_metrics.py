"""HttpMetricsMiddleware on a real uvicorn server: route templates (not raw paths), status codes of
handled and unhandled errors, unmatched paths, streams measured to their start, WebSockets ignored."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import websockets
from fastapi import FastAPI, HTTPException, WebSocket
from fastapi.responses import StreamingResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from shared.http_metrics import HttpMetricsMiddleware, install_http_metrics
from tests.support.servers import serve_app


def _build_app(registry: CollectorRegistry, release_stream: asyncio.Event) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        install_http_metrics(app, registry)
        yield

    app = FastAPI(lifespan=lifespan)

    @app.get("/items/{item_id}")
    async def item(item_id: int) -> dict:
        if item_id == 0:
            raise HTTPException(404, "no such item")
        return {"id": item_id}

    @app.post("/boom")
    async def boom() -> dict:
        raise RuntimeError("unhandled on purpose")

    @app.get("/stream")
    async def stream() -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            yield b"first\n"
            await release_stream.wait()  # the stream stays open until the test has scraped
            yield b"last\n"

        return StreamingResponse(body(), media_type="text/plain")

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_text("hi")
        await websocket.close()

    app.add_middleware(HttpMetricsMiddleware)
    return app


def _samples(registry: CollectorRegistry) -> list:
    text = generate_latest(registry).decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def _requests(registry: CollectorRegistry) -> dict[tuple[str, str, str], float]:
    return {
        (s.labels["method"], s.labels["route"], s.labels["status"]): s.value
        for s in _samples(registry) if s.name == "http_requests_total"
    }


def _duration_count(registry: CollectorRegistry, method: str, route: str) -> float:
    for s in _samples(registry):
        if s.name == "http_request_duration_seconds_count" and s.labels == {"method": method, "route": route}:
            return s.value
    return 0.0


async def test_requests_counted_by_route_template_and_status():
    registry = CollectorRegistry()
    release = asyncio.Event()
    async with serve_app(_build_app(registry, release)) as url, httpx.AsyncClient(base_url=url) as http:
        assert (await http.get("/items/1")).status_code == 200
        assert (await http.get("/items/2")).status_code == 200
        assert (await http.get("/items/0")).status_code == 404
        assert (await http.get("/items/abc")).status_code == 422
        assert (await http.get("/nowhere/42")).status_code == 404
        assert (await http.delete("/items/1")).status_code == 405
        assert (await http.post("/boom")).status_code == 500
        async with websockets.connect(url.replace("http://", "ws://") + "/ws") as ws:
            assert await ws.recv() == "hi"

        counts = _requests(registry)
        assert counts == {
            ("GET", "/items/{item_id}", "200"): 2,
            ("GET", "/items/{item_id}", "404"): 1,
            ("GET", "/items/{item_id}", "422"): 1,
            ("GET", "unmatched", "404"): 1,
            ("DELETE", "/items/{item_id}", "405"): 1,
            ("POST", "/boom", "500"): 1,
        }
        # The raw path never becomes a label (ids would make the series unbounded).
        assert not any("/items/1" in route for _, route, _ in counts)
        assert _duration_count(registry, "GET", "/items/{item_id}") == 4


async def test_a_stream_is_measured_to_its_start():
    registry = CollectorRegistry()
    release = asyncio.Event()
    async with (
        serve_app(_build_app(registry, release)) as url,
        httpx.AsyncClient(base_url=url) as http,
        http.stream("GET", "/stream") as response,
    ):
        lines = response.aiter_lines()
        assert await anext(lines) == "first"
        # Still streaming, yet already counted: its latency is the time to the stream's start.
        assert _requests(registry) == {("GET", "/stream", "200"): 1}
        assert _duration_count(registry, "GET", "/stream") == 1
        release.set()
        assert await anext(lines) == "last"
    assert _requests(registry) == {("GET", "/stream", "200"): 1}


async def test_an_app_without_installed_metrics_still_answers():
    app = FastAPI()  # no lifespan installs the metrics: the middleware must only pass requests through

    @app.get("/ping")
    async def ping() -> dict:
        return {"ok": True}

    app.add_middleware(HttpMetricsMiddleware)
    async with serve_app(app) as url, httpx.AsyncClient(base_url=url) as http:
        assert (await http.get("/ping")).json() == {"ok": True}
