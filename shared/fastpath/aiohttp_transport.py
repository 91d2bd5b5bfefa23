"""``AiohttpTransport``: httpx's API on aiohttp's connection pool and C parser, for streamed answers.

A model's answer and the Agent Service's event stream are one small HTTP chunk per token. Read
through httpx's own transport, every chunk passes h11's pure-Python parser, httpcore's layers and
an anyio cancel scope per read (and each request start scans the whole pool, polling every idle
socket): 64 us of CPU per chunk against 22 us through this transport, 100 paced streams of 200
chunks in one process (docs/benchmarks-history.md). Code above keeps httpx's API, timeouts and exceptions:
``httpx.AsyncClient(transport=AiohttpTransport(...))`` is the only line that knows.

With ``read_window_s``, a fast stream is read at most once per window: after a read that came
within two windows of the one before, the socket is left unread for the rest of the window, so the
tokens a fast model sends meanwhile wait in the kernel and come in one read, through the parser and
every layer above once instead of once per token. A slow stream (a token every 20 ms) is read as it
comes. The window is a fraction of the coalescing budget (``coalesce.read_window_s``): the deltas
it holds back would have waited for their chunk anyway.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import httpx

__all__ = ["AiohttpTransport"]

# Idle connections are let go before 5 s, the keep-alive timeout of uvicorn (the Agent Service,
# vLLM, LiteLLM): reusing one the server is closing at that moment fails the request.
KEEPALIVE_S = 4.0
# A request whose connection breaks before any answer is sent again on another connection: most
# often a kept-alive one the server closed while idle, which never read the request.
ATTEMPTS = 3


class AiohttpTransport(httpx.AsyncBaseTransport):
    """Up to ``max_connections`` kept-alive connections. Redirects, authentication and decoding stay
    httpx's; proxies are the client's (httpx mounts its own transport for a proxied URL)."""

    def __init__(self, *, max_connections: int, read_window_s: float = 0.0) -> None:
        self._max_connections = max_connections
        self._read_window = read_window_s
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        # Opened on first use: a session binds to the running loop.
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections, limit_per_host=0, keepalive_timeout=KEEPALIVE_S
            )
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False, trust_env=False)
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = self._open()
        body = await request.aread()
        timeout = _timeout(request.extensions.get("timeout", {}))
        for attempt in range(1, ATTEMPTS + 1):
            try:
                answer = await session.request(
                    request.method, str(request.url), data=body, headers=list(request.headers.multi_items()),
                    allow_redirects=False, timeout=timeout,
                )
                break
            except Exception as exc:
                if attempt < ATTEMPTS and _broke_before_answer(exc):
                    continue
                mapped = _httpx_error(exc, request)
                if mapped is exc:
                    raise
                raise mapped from exc
        return httpx.Response(
            answer.status, headers=list(answer.raw_headers), stream=_Body(answer, request, self._read_window),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": (answer.reason or "").encode()},
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


class _Body(httpx.AsyncByteStream):
    """The answer's body in the pieces the network delivered (a token's chunk as it was sent)."""

    def __init__(self, answer: aiohttp.ClientResponse, request: httpx.Request, read_window_s: float) -> None:
        self._answer = answer
        self._request = request
        self._window = read_window_s

    async def __aiter__(self) -> AsyncIterator[bytes]:
        window = self._window
        connection = self._answer.connection
        transport = connection.transport if window > 0 and connection is not None else None
        loop = asyncio.get_running_loop()
        last = float("-inf")
        try:
            async for chunk in self._answer.content.iter_any():
                came = loop.time()
                fast, last = came - last < 2 * window, came
                yield chunk
                if transport is not None and fast:
                    await _leave_unread(transport, came + window - loop.time())
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise _httpx_error(exc, self._request) from exc  # always one of httpx's for these

    async def aclose(self) -> None:
        # Back to the pool once read to its end; closed otherwise.
        self._answer.release()


async def _leave_unread(transport: asyncio.Transport, seconds: float) -> None:
    """Leave the socket unread for ``seconds`` (unless flow control or a close already stopped it)."""
    if seconds <= 0 or transport.is_closing() or not transport.is_reading():
        return
    transport.pause_reading()
    try:
        await asyncio.sleep(seconds)
    finally:
        if not transport.is_closing():
            transport.resume_reading()


def _timeout(limits: dict[str, float | None]) -> aiohttp.ClientTimeout:
    """httpx's per-request timeouts in aiohttp's terms (aiohttp's ``connect`` includes the wait
    for a pooled connection; there is no write timeout: a request body here is small)."""
    connect, pool = limits.get("connect"), limits.get("pool")
    waiting = None if connect is None or pool is None else connect + pool
    return aiohttp.ClientTimeout(total=None, connect=waiting, sock_connect=connect, sock_read=limits.get("read"))


def _broke_before_answer(exc: Exception) -> bool:
    """The connection broke while the request went out (not a failure to connect)."""
    return isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)) and not isinstance(
        exc, aiohttp.ClientConnectorError
    )


def _httpx_error(exc: BaseException, request: httpx.Request) -> BaseException:
    """aiohttp's failures as the httpx exceptions callers already handle; others unchanged."""
    detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(detail, request=request)
    if isinstance(exc, (aiohttp.ServerTimeoutError, TimeoutError)):
        return httpx.ReadTimeout(detail, request=request)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(detail, request=request)
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError)):
        return httpx.RemoteProtocolError(detail, request=request)
    if isinstance(exc, (aiohttp.ClientError, OSError)):
        return httpx.ReadError(detail, request=request)
    return exc
