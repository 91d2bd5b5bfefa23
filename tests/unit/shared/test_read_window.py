"""``AiohttpTransport``'s read window against a real socket server on loopback: a fast stream is
read at most once per window after its first reads, with every byte in order; a slow stream is read
piece by piece as it comes; the window follows the coalescing budget."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from shared.fastpath.aiohttp_transport import AiohttpTransport
from shared.fastpath.coalesce import read_window_s, split_budget
from tests.support.servers import free_port


@asynccontextmanager
async def streaming_server(pieces: list[bytes], gap_s: float) -> AsyncIterator[str]:
    """Answers a POST with ``pieces``, one write each, ``gap_s`` apart (as a model sends tokens)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n"
                % sum(map(len, pieces))
            )
            for piece in pieces:
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(gap_s)
        finally:
            writer.close()

    port = free_port()
    srv = await asyncio.start_server(handle, "127.0.0.1", port)
    try:
        yield f"http://127.0.0.1:{port}/v1/chat/completions"
    finally:
        srv.close()
        await srv.wait_closed()


async def reads(url: str, window_s: float) -> tuple[list[bytes], float]:
    """The body's reads as the transport gave them, and the seconds from the first to the last."""
    loop = asyncio.get_running_loop()
    transport = AiohttpTransport(max_connections=1, read_window_s=window_s)
    async with httpx.AsyncClient(transport=transport, timeout=5.0) as http, \
            http.stream("POST", url, content=b"{}") as response:
        got, first = [], None
        async for chunk in response.aiter_raw():
            first = loop.time() if first is None else first
            got.append(chunk)
        return got, loop.time() - first


def tokens(n: int) -> list[bytes]:
    return [b'data: {"choices":[{"delta":{"content":"t%03d "}}]}\n\n' % i for i in range(n)]


async def test_a_fast_stream_is_read_at_most_once_per_window_and_loses_nothing() -> None:
    pieces, window = tokens(300), 0.005
    async with streaming_server(pieces, gap_s=0.0005) as url:
        got, seconds = await reads(url, window)
    assert b"".join(got) == b"".join(pieces)
    # After the first two reads, each comes a window or more after the one before.
    assert len(got) <= 2 + seconds / window + 1, (len(got), seconds)
    assert len(got) < len(pieces) / 3


async def test_a_slow_stream_is_read_piece_by_piece() -> None:
    pieces = tokens(5)
    async with streaming_server(pieces, gap_s=0.1) as url:
        got, _ = await reads(url, 0.005)
    assert got == pieces


def test_the_window_is_a_fifth_of_the_coalescing_budget_at_most_5_ms_and_off_with_it() -> None:
    assert read_window_s(0) == 0
    assert read_window_s(10) == 0.002
    assert read_window_s(25) == 0.005
    assert read_window_s(1000) == 0.005


def test_the_budget_is_shared_between_the_read_window_and_the_chunk_s_hold() -> None:
    assert split_budget(25) == (20, 0.005)
    assert split_budget(0) == (0, 0)
    hold_ms, window_s = split_budget(10)
    assert hold_ms + window_s * 1000 == 10
