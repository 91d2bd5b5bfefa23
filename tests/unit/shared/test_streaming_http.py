"""``StreamingHTTP`` against a real socket server on loopback: a kept-alive connection the server
drops is replaced without failing the call; failures come out as the module's three errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from shared.fastpath.streaming_http import HTTPConnectError, HTTPTimeout, StreamingHTTP
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


async def post(http: StreamingHTTP, url: str) -> tuple[int, bytes]:
    async with http.post(url, body=BODY, headers={"Content-Type": "application/json"}) as response:
        return response.status, b"".join([chunk async for chunk in response.chunks()])


async def test_a_dropped_kept_alive_connection_is_replaced_and_the_call_succeeds() -> None:
    http = StreamingHTTP(max_connections=4, connect_timeout=2, read_timeout=2)
    try:
        async with server(drop_second_request=True) as seen:
            assert await post(http, seen["url"]) == (200, ANSWER)
            assert await post(http, seen["url"]) == (200, ANSWER)  # its first connection is dropped
            assert seen["connections"] == 2 and seen["answered"] == 2
    finally:
        await http.aclose()
    assert http.is_closed


async def test_a_refused_connection_is_a_connect_error() -> None:
    http = StreamingHTTP(max_connections=1, connect_timeout=2, read_timeout=2)
    try:
        with pytest.raises(HTTPConnectError):
            await post(http, f"http://127.0.0.1:{free_port()}/v1/chat/completions")
    finally:
        await http.aclose()


async def test_silence_longer_than_the_read_timeout_is_a_read_timeout() -> None:
    http = StreamingHTTP(max_connections=1, connect_timeout=2, read_timeout=0.2)
    try:
        async with server(answer_after_s=2.0) as seen:
            with pytest.raises(HTTPTimeout) as caught:
                await post(http, seen["url"])
            assert caught.value.phase == "read"
    finally:
        await http.aclose()
