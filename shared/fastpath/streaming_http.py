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
            connector = aiohttp.TCPConnector(limit=self._max_connections, limit_per_host=0)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout, trust_env=True)
        return self._session

    @asynccontextmanager
    async def post(self, url: str, *, body: bytes, headers: Mapping[str, str]) -> AsyncIterator[StreamedResponse]:
        """POST ``body`` and hold the answer open while the block reads it; the connection goes back
        to the pool (or is closed, if the body was not read to its end) when the block ends."""
        with _mapped():
            response = await self._open().post(url, data=body, headers=dict(headers))
        try:
            yield StreamedResponse(response)
        finally:
            response.release()

    async def aclose(self) -> None:
        self._closed = True
        if self._session is not None:
            await self._session.close()


class _mapped:
    """aiohttp's and asyncio's failures as this module's three errors."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _tb: object) -> bool:
        if exc is None or isinstance(exc, HTTPStreamError):
            return False
        if isinstance(exc, (aiohttp.ServerTimeoutError, asyncio.TimeoutError)):
            phase = "connect" if isinstance(exc, aiohttp.ConnectionTimeoutError) else "read"
            raise HTTPTimeout(phase) from exc
        if isinstance(exc, aiohttp.ClientConnectorError):
            raise HTTPConnectError(str(exc)) from exc
        if isinstance(exc, (aiohttp.ClientError, OSError)):
            raise HTTPStreamError(type(exc).__name__) from exc
        return False
