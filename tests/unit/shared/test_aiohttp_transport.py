"""``AiohttpTransport`` under httpx against a real socket server on loopback: a kept-alive
connection the server drops is replaced without failing the request; failures come out as httpx's
exceptions; the body arrives in the pieces the server sent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from shared.fastpath.aiohttp_transport import AiohttpTransport
from tests.support.servers import free_port

BODY = b'{"hello": "world"}'
ANSWER = b"data: 1\n\ndata: 2\n\n"


@asynccontextmanager
async def server(*, drop_second_request: bool = False, answer_after_s: float = 0.0) -> AsyncIterator[dict]:
    """An HTTP/1.1 server that answers each POST with ANSWER, keeping the connection open; with
    ``drop_second_request`` it closes a connection when a second request arrives on it, without
    answering (as a server does with a connection it considered idle)."""
    seen = {"connections": 0, "answered": 0}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen["connections"] += 1
        requests = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                requests += 1
                if drop_second_request and requests == 2:
                    return
                await asyncio.sleep(answer_after_s)
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER)
                )
                await writer.drain()
                seen["answered"] += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    port = free_port()
    srv = await asyncio.start_server(handle, "127.0.0.1", port)
    seen["url"] = f"http://127.0.0.1:{port}/v1/chat/completions"
    try:
        yield seen
    finally:
        srv.close()
        await srv.wait_closed()


def client(read_timeout: float = 2.0) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=AiohttpTransport(max_connections=4), timeout=httpx.Timeout(2.0, read=read_timeout)
    )


async def post(http: httpx.AsyncClient, url: str) -> tuple[int, str, bytes]:
    async with http.stream("POST", url, content=BODY, headers={"Content-Type": "application/json"}) as response:
        body = b"".join([chunk async for chunk in response.aiter_raw()])
        return response.status_code, response.headers["content-type"], body


async def test_a_dropped_kept_alive_connection_is_replaced_and_the_request_succeeds() -> None:
    async with client() as http, server(drop_second_request=True) as seen:
        assert await post(http, seen["url"]) == (200, "text/event-stream", ANSWER)
        assert await post(http, seen["url"]) == (200, "text/event-stream", ANSWER)  # its first connection is dropped
        assert seen["connections"] == 2 and seen["answered"] == 2


async def test_a_refused_connection_is_a_connect_error() -> None:
    async with client() as http:
        with pytest.raises(httpx.ConnectError):
            await post(http, f"http://127.0.0.1:{free_port()}/v1/chat/completions")


async def test_silence_longer_than_the_read_timeout_is_a_read_timeout() -> None:
    async with client(read_timeout=0.2) as http, server(answer_after_s=2.0) as seen:
        with pytest.raises(httpx.ReadTimeout):
            await post(http, seen["url"])
