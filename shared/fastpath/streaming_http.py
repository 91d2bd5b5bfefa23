"""``StreamingHTTP``: a pooled client for long streamed POST answers, read through aiohttp's C parser.

A model's answer is one small HTTP chunk per token. Read through httpx, every chunk passes h11's
pure-Python parser, httpcore's layers and an anyio cancel scope per read: about 64 us of CPU per
token against aiohttp's 20 us on the same stream (100 paced streams of 200 tokens, one process;
docs/benchmarks.md). The provider sees a status, headers and body chunks; failures come out as the
three errors below, mapped here once, so nothing above this module knows which library reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import aiohttp

__all__ = ["HTTPConnectError", "HTTPStreamError", "HTTPTimeout", "StreamedResponse", "StreamingHTTP"]


class HTTPStreamError(Exception):
    """The exchange failed below HTTP: the connection broke, or the body was cut or malformed."""


class HTTPConnectError(HTTPStreamError):
    """No connection could be made."""


class HTTPTimeout(HTTPStreamError):
    """A timeout passed; ``phase`` says which: ``connect`` (connecting or waiting for a pooled
    connection) or ``read`` (no byte of the answer for ``read_timeout`` seconds)."""

    def __init__(self, phase: str) -> None:
        super().__init__(f"{phase} timeout")
        self.phase = phase


class StreamedResponse:
    """The answer's status line and headers, and its body as it arrives."""

    __slots__ = ("_response",)

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    @property
    def status(self) -> int:
        return self._response.status

    @property
    def reason(self) -> str:
        return self._response.reason or ""

    @property
    def headers(self) -> Mapping[str, str]:
        return self._response.headers

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body, in the pieces the network delivered (a token's chunk arrives as it is sent)."""
        with _mapped():
            async for chunk in self._response.content.iter_any():
                yield chunk

    async def read(self, limit: int) -> bytes:
        """At most ``limit`` bytes of the body (an error message, say), waiting for the rest of it."""
        body = b""
        with _mapped():
            while len(body) < limit:
                chunk = await self._response.content.read(limit - len(body))
                if not chunk:
                    break
                body += chunk
        return body


class StreamingHTTP:
    """One pool of up to ``max_connections`` kept-alive connections, for streamed POSTs.

    Created outside a running loop too (its session is opened on first use). Proxies come from the
    environment (``HTTPS_PROXY``...), as with httpx.
    """

    # Idle connections are let go before 5 s, the keep-alive timeout of uvicorn (vLLM, LiteLLM and
    # most Python servers): reusing one the server is closing at that moment fails the call.
    KEEPALIVE_S = 4.0
    # A call whose connection breaks before any answer is sent again on another connection: most
    # often a kept-alive one the server closed while idle, which never read the request.
    ATTEMPTS = 3

    def __init__(self, *, max_connections: int, connect_timeout: float, read_timeout: float) -> None:
        self._max_connections = max_connections
        # ``connect`` also bounds the wait for a pooled connection; no total, the stream is long.
        self._timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout, sock_read=read_timeout)
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    @property
    def is_closed(self) -> bool:
        return self._closed

    def _open(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("the HTTP client is closed")
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections, limit_per_host=0, keepalive_timeout=self.KEEPALIVE_S
            )
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout, trust_env=True)
        return self._session

    @asynccontextmanager
    async def post(self, url: str, *, body: bytes, headers: Mapping[str, str]) -> AsyncIterator[StreamedResponse]:
        """POST ``body`` and hold the answer open while the block reads it; the connection goes back
        to the pool (or is closed, if the body was not read to its end) when the block ends."""
        session = self._open()
        attempt = 1
        while True:
            try:
                response = await session.post(url, data=body, headers=dict(headers))
                break
            except Exception as exc:
                if attempt < self.ATTEMPTS and _broke_before_answer(exc):
                    attempt += 1
                    continue
                mapped = _stream_error(exc)
                if mapped is None:
                    raise
                raise mapped from exc
        try:
            yield StreamedResponse(response)
        finally:
            response.release()

    async def aclose(self) -> None:
        self._closed = True
        if self._session is not None:
            await self._session.close()


def _broke_before_answer(exc: Exception) -> bool:
    """The connection broke while the request went out (not a failure to connect)."""
    return isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)) and not isinstance(
        exc, aiohttp.ClientConnectorError
    )


def _stream_error(exc: BaseException) -> HTTPStreamError | None:
    """aiohttp's and asyncio's failures as this module's three errors; None for anything else."""
    if isinstance(exc, HTTPStreamError):
        return exc
    if isinstance(exc, (aiohttp.ServerTimeoutError, asyncio.TimeoutError)):
        return HTTPTimeout("connect" if isinstance(exc, aiohttp.ConnectionTimeoutError) else "read")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return HTTPConnectError(str(exc))
    if isinstance(exc, (aiohttp.ClientError, OSError)):
        return HTTPStreamError(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    return None


class _mapped:
    """Failures inside the block raised as ``_stream_error``s."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _tb: object) -> bool:
        mapped = None if exc is None else _stream_error(exc)
        if mapped is None or mapped is exc:
            return False
        raise mapped from exc
