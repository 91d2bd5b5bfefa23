"""How the SDK reaches one server: a stdio subprocess or Streamable HTTP, as an entered ``mcp.Client``.

Two things are added around the SDK's transports. A stdio server's read side says when it ends
(``_WatchedRead``): the SDK's session stays open after its server exited, and the connection must
know to start it again. An HTTP server's answers are bounded: an SSE event by the SDK
(``max_sse_event_size``), a JSON body by ``_CappedTransport``, so a server that sends an enormous
answer costs at most the cap in memory and its call a clear error.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Self

import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from agent_service.mcp.config import Limits, MCPServer

CLIENT_INFO = types.Implementation(name="taskforce-agent-service", version="1.0")
# An SSE event may carry a whole result plus its JSON-RPC envelope.
_ENVELOPE_BYTES = 64 * 1024

Elicitation = Callable[[Any, types.ElicitRequestParams], Awaitable[types.ElicitResult | types.ErrorData]]
MessageHandler = Callable[[Any], Awaitable[None]]


class AnswerTooLarge(httpx2.StreamError):
    """A server's JSON answer passed the cap (a ``StreamError``: the SDK fails that request alone)."""


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, max_bytes: int) -> None:
        self._inner = inner
        self._max = max_bytes

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._max:
                raise AnswerTooLarge(f"the answer exceeded the {self._max} byte limit")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _CappedTransport(httpx2.AsyncBaseTransport):
    """JSON answers cut off past ``max_bytes`` (an SSE stream is bounded per event by the SDK)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, max_bytes: int) -> None:
        self._inner = inner
        self._max = max_bytes

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            return response
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        response.stream = _CappedStream(response.stream, self._max)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class _TokenStore:
    """Where the SDK's OAuth provider keeps the access token it got: this process's memory."""

    def __init__(self) -> None:
        self._tokens: OAuthToken | None = None
        self._client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self._tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self._tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self._client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self._client = client_info


class _WatchedRead:
    """The read side of a transport, setting ``ended`` when it ends (the server went away)."""

    def __init__(self, inner: Any, ended: asyncio.Event) -> None:
        self._inner = inner
        self._ended = ended
        self.last_context = None

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except BaseException:
            self._ended.set()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedRead:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._inner.__anext__()
        except StopAsyncIteration:
            self._ended.set()
            raise

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> bool | None:
        self._ended.set()
        return await self._inner.__aexit__(*exc)


class _Watched:
    """A transport whose read side is watched (``_WatchedRead``)."""

    def __init__(self, inner: Any, ended: asyncio.Event) -> None:
        self._inner = inner
        self._ended = ended

    async def __aenter__(self) -> tuple[Any, Any]:
        read, write = await self._inner.__aenter__()
        return _WatchedRead(read, self._ended), write

    async def __aexit__(self, *exc: object) -> bool | None:
        return await self._inner.__aexit__(*exc)


def _http_client(server: MCPServer, limits: Limits) -> httpx2.AsyncClient:
    config = server.config
    headers = {key: value.reveal() for key, value in server.headers.items()}
    auth: httpx2.Auth | None = None
    if server.bearer_token is not None:
        headers["Authorization"] = f"Bearer {server.bearer_token.reveal()}"
    elif config.oauth is not None and server.client_secret is not None:
        auth = _oauth(server)
    # No read timeout of its own: a call's own timer bounds it (connection.Call), and a call that
    # waits for the user's answer keeps its response open on purpose.
    timeout = httpx2.Timeout(limits.connect_timeout_s, read=None)
    transport = _CappedTransport(httpx2.AsyncHTTPTransport(), server.max_result_bytes + _ENVELOPE_BYTES)
    return httpx2.AsyncClient(headers=headers, auth=auth, timeout=timeout, transport=transport)


def _oauth(server: MCPServer) -> OAuthClientProvider:
    oauth = server.config.oauth
    assert oauth is not None and server.client_secret is not None and server.config.url is not None
    return ClientCredentialsOAuthProvider(
        server_url=server.config.url, storage=_TokenStore(), client_id=oauth.client_id,
        client_secret=server.client_secret.reveal(), token_endpoint_auth_method=oauth.auth_method,
        scope=oauth.scope, issuer=oauth.issuer,
    )


def _mode(server: MCPServer) -> str:
    protocol = server.config.protocol
    return {"auto": "auto", "2025-11-25": "legacy"}.get(protocol, protocol)


@asynccontextmanager
async def open_client(
    server: MCPServer, limits: Limits, *, elicitation: Elicitation, on_message: MessageHandler, ended: asyncio.Event,
) -> AsyncIterator[Client]:
    """The server's ``Client``, connected (the handshake or ``server/discover`` within the connect
    timeout); ``ended`` is set when a stdio server's output ends."""
    config = server.config
    async with AsyncExitStack() as stack:
        if config.command is not None:
            params = StdioServerParameters(
                command=config.command, args=config.args, cwd=config.cwd,
                env={key: value.reveal() for key, value in server.env.items()},
            )
            transport: Any = _Watched(stdio_client(params, errlog=sys.stderr), ended)
        else:
            assert config.url is not None
            http = await stack.enter_async_context(_http_client(server, limits))
            transport = streamable_http_client(
                config.url, http_client=http, max_sse_event_size=server.max_result_bytes + _ENVELOPE_BYTES,
            )
        client = Client(
            transport, mode=_mode(server), read_timeout_seconds=limits.connect_timeout_s,
            elicitation_callback=elicitation, message_handler=on_message, client_info=CLIENT_INFO, cache=None,
        )
        yield await stack.enter_async_context(client)
