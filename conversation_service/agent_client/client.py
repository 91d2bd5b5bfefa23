"""``AgentServiceClient``: the conversation service's SDK for the Agent Service (contract v1).

One instance per process, holding one pooled ``httpx.AsyncClient`` (its own, or one injected by
the caller, which then also owns its lifetime)::

    async with AgentServiceClient(base_url, api_key) as client:
        async with client.execute_agent(request) as stream:
            async for event in stream:          # EventEnvelope, each seq exactly once
                ...

Every call sends ``X-API-Key`` (never logged, never part of an error) and, when one is bound in
the logging context, the caller's ``X-Request-ID`` so one request can be followed across services.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote, urlencode, urlsplit

import httpx
import orjson
import pydantic

from conversation_service.agent_client.config import AgentClientConfig
from conversation_service.agent_client.connection import AgentConnection, SSEConnection
from conversation_service.agent_client.errors import (
    AgentProtocolError,
    AgentTimeoutError,
    error_for_status,
    translating_transport_errors,
)
from conversation_service.agent_client.retry import RetryHook, Sleep, call_with_retries
from conversation_service.agent_client.stream import AgentEventStream
from shared.logging import REQUEST_ID_HEADER, request_id_var
from shared.protocol import (
    MAX_ID_CHARS,
    ExecuteRequest,
    MemoryDeleted,
    MemoryList,
    SessionStatusResponse,
    UserContext,
)
from shared.sse import SSE_MEDIA_TYPE

API_PREFIX = "/api/v1/agent"
IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
API_KEY_HEADER = "X-API-Key"
LAST_EVENT_ID_HEADER = "Last-Event-ID"

# Visible ASCII only: the key travels in a header and is used by the service as a lookup key.
_TOKEN_RE = re.compile(rf"^[\x21-\x7e]{{1,{MAX_ID_CHARS}}}$")


def _check_token(name: str, value: str) -> str:
    if not isinstance(value, str) or not _TOKEN_RE.match(value):
        raise ValueError(f"{name} must be 1-{MAX_ID_CHARS} visible ASCII characters")
    return value


class AgentServiceClient:
    """Calls the Agent Service; see the module docstring and :mod:`.errors` for the error tree."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        http_client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        config: AgentClientConfig | None = None,
        sleep: Sleep = asyncio.sleep,
        on_retry: RetryHook | None = None,
        on_reconnect: RetryHook | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
            raise ValueError("base_url must be an http(s) URL without query or fragment")
        if not isinstance(api_key, str) or not api_key or any(c in api_key for c in "\r\n\0"):
            raise ValueError("api_key must be a non-empty single-line string")
        self.base_url = base_url.rstrip("/")
        self.__api_key = api_key
        self.config = config or AgentClientConfig()
        # Injectable so tests can assert the backoff schedule without waiting for it.
        self._sleep = sleep
        self.on_retry = on_retry
        self.on_reconnect = on_reconnect
        # What its event streams use of it, and nothing else.
        self.connection = AgentConnection(
            self.config, self._open_stream, self._events_request, self.get_session_status, sleep, self,
        )
        self._owns_http = http_client is None
        # ``transport``: what the client it creates sends through (the ConversationService's is
        # ``shared.fastpath.aiohttp_transport``: an event per chunk costs a third of the CPU).
        self._http = http_client or httpx.AsyncClient(
            transport=transport,
            limits=httpx.Limits(
                max_connections=self.config.max_connections,
                max_keepalive_connections=self.config.max_keepalive_connections,
            ),
            timeout=self._timeout(),
            # A redirect would carry the API key to wherever it points.
            follow_redirects=False,
        )

    def __repr__(self) -> str:
        return f"<AgentServiceClient {self.base_url}>"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Closes the connection pool if this client created it."""
        if self._owns_http:
            await self._http.aclose()

    # -- public API ---------------------------------------------------------------------------

    def execute_agent(self, request: ExecuteRequest, *, idempotency_key: str | None = None) -> AgentEventStream:
        """Start (or, with an ``answer``, resume) a run; the stream opens on ``async with``/iteration.

        Every try of this execution sends the same ``Idempotency-Key`` (generated when not given),
        so a retry after a lost answer joins the run the first try started.
        """
        if not isinstance(request, ExecuteRequest):
            raise TypeError("request must be an ExecuteRequest")
        key = _check_token("idempotency_key", idempotency_key) if idempotency_key is not None else uuid.uuid4().hex
        body = orjson.dumps(request.model_dump(mode="json"))

        def open_request() -> httpx.Request:
            return self._build(
                "POST",
                f"{API_PREFIX}/execute",
                headers={
                    IDEMPOTENCY_KEY_HEADER: key,
                    "Accept": SSE_MEDIA_TYPE,
                    "Accept-Encoding": "identity",
                    "Content-Type": "application/json",
                },
                content=body,
                timeout=self._stream_timeout(),
            )

        return AgentEventStream(
            self.connection, operation="execute", open_request=open_request, session_id=request.session_id, idempotency_key=key
        )

    def stream_events(self, session_id: str, last_event_id: int | None = None) -> AgentEventStream:
        """Events of a session after ``last_event_id`` (all of them when None), then the live ones."""
        _check_token("session_id", session_id)
        if last_event_id is not None and (
            not isinstance(last_event_id, int) or isinstance(last_event_id, bool) or last_event_id < 0
        ):
            raise ValueError("last_event_id must be an int >= 0")
        return AgentEventStream(
            self.connection, operation="stream_events", session_id=session_id, last_seq=last_event_id, end_on_terminal=False
        )

    async def get_session_status(self, session_id: str) -> SessionStatusResponse:
        return await self._session_call("get_session_status", "GET", session_id, "")

    async def cancel(self, session_id: str) -> SessionStatusResponse:
        """Cancels the session's running or paused run (it ends with ERROR ``CANCELLED``).

        Raises :class:`AgentConflictError` when there is nothing to cancel.
        """
        return await self._session_call("cancel", "POST", session_id, "/cancel")

    async def list_memory(self, user: UserContext) -> MemoryList:
        """What the agent remembers about ``user`` (their organisation's and their own only), newest first."""
        body = await self._call_json("list_memory", "GET", f"{API_PREFIX}/memory?{_owner_query(user)}")
        try:
            return MemoryList.model_validate(body)
        except pydantic.ValidationError as exc:
            raise AgentProtocolError("invalid memory list from the Agent Service") from exc

    async def forget(self, user: UserContext, memory_id: int | None = None) -> MemoryDeleted:
        """Delete one of ``user``'s memories, or all of them. :class:`AgentNotFoundError` when
        ``memory_id`` is not one of theirs. Deleting twice deletes nothing more, so it is retried."""
        path = f"{API_PREFIX}/memory" if memory_id is None else f"{API_PREFIX}/memory/{int(memory_id)}"
        body = await self._call_json("forget", "DELETE", f"{path}?{_owner_query(user)}")
        try:
            return MemoryDeleted.model_validate(body)
        except pydantic.ValidationError as exc:
            raise AgentProtocolError("invalid answer to a memory deletion from the Agent Service") from exc

    async def health(self) -> dict[str, Any]:
        """``GET /health``, tried once: a health check reports the state now, it does not wait it out."""
        body = await self._call_json("health", "GET", "/health", retries=False)
        if not isinstance(body, dict):
            raise AgentProtocolError("invalid health answer from the Agent Service")
        return body

    async def _session_call(self, operation: str, method: str, session_id: str, suffix: str) -> SessionStatusResponse:
        path = f"{API_PREFIX}/sessions/{quote(_check_token('session_id', session_id), safe='')}{suffix}"
        body = await self._call_json(operation, method, path)
        try:
            return SessionStatusResponse.model_validate(body)
        except pydantic.ValidationError as exc:
            raise AgentProtocolError("invalid session status from the Agent Service") from exc

    # -- what its event streams use (``AgentConnection``) ----------------------------------------

    def _events_request(self, session_id: str, last_seq: int | None) -> httpx.Request:
        headers = {"Accept": SSE_MEDIA_TYPE, "Accept-Encoding": "identity"}
        if last_seq is not None:
            headers[LAST_EVENT_ID_HEADER] = str(last_seq)
        return self._build(
            "GET", f"{API_PREFIX}/sessions/{quote(session_id, safe='')}/events", headers=headers,
            timeout=self._stream_timeout(),
        )

    async def _open_stream(self, request: httpx.Request, deadline: float | None = None) -> SSEConnection:
        """Sends a streaming request; a non-200 answer becomes the matching error.

        The request is built without a read timeout (``_stream_timeout``): the caller bounds the
        wait for the answer's headers, and the connection's own timer bounds every read of the body
        by ``read_timeout`` and ``deadline``.
        """
        with translating_transport_errors():
            response = await self._http.send(request, stream=True)
        try:
            if response.status_code != 200:
                raise error_for_status(
                    response.status_code,
                    await self._read_capped(response, truncate=True),
                    request_id=response.headers.get(REQUEST_ID_HEADER),
                )
            media_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if media_type != SSE_MEDIA_TYPE:
                raise AgentProtocolError(f"expected {SSE_MEDIA_TYPE}, got {media_type or 'no content type'}")
        except BaseException:
            await response.aclose()
            raise
        return SSEConnection(
            response, self.config.max_event_bytes, idle_s=self.config.read_timeout, deadline=deadline
        )

    # -- plumbing ------------------------------------------------------------------------------

    def _timeout(self) -> httpx.Timeout:
        c = self.config
        return httpx.Timeout(connect=c.connect_timeout, read=c.read_timeout, write=c.write_timeout, pool=c.pool_timeout)

    def _stream_timeout(self) -> httpx.Timeout:
        """An event stream's: no read timeout of httpx's, whose per-read timeout scope is the
        costliest part of reading an event; ``SSEConnection`` watches the reads instead."""
        c = self.config
        return httpx.Timeout(connect=c.connect_timeout, read=None, write=c.write_timeout, pool=c.pool_timeout)

    def _build(
        self, method: str, path: str, *, headers: dict[str, str] | None = None, content: bytes | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> httpx.Request:
        all_headers = {API_KEY_HEADER: self.__api_key, **(headers or {})}
        request_id = request_id_var.get()
        if request_id:
            all_headers[REQUEST_ID_HEADER] = request_id
        return self._http.build_request(
            method, self.base_url + path, headers=all_headers, content=content, timeout=timeout or self._timeout()
        )

    async def _call_json(self, operation: str, method: str, path: str, *, retries: bool = True) -> Any:
        async def attempt() -> Any:
            try:
                async with asyncio.timeout(self.config.request_timeout):
                    return await self._send_json(method, path)
            except TimeoutError as exc:
                raise AgentTimeoutError(f"{operation} got no answer within {self.config.request_timeout} s") from exc

        if not retries:
            return await attempt()
        return await call_with_retries(operation, attempt, config=self.config, sleep=self._sleep, on_retry=self.on_retry)

    async def _send_json(self, method: str, path: str) -> Any:
        request = self._build(method, path, headers={"Accept": "application/json"})
        with translating_transport_errors():
            response = await self._http.send(request, stream=True)
        try:
            body = await self._read_capped(response, truncate=not response.is_success)
        finally:
            await response.aclose()
        if not response.is_success:
            raise error_for_status(response.status_code, body, request_id=response.headers.get(REQUEST_ID_HEADER))
        if not body:
            return None
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise AgentProtocolError("the Agent Service answered with invalid JSON") from exc

    async def _read_capped(self, response: httpx.Response, *, truncate: bool) -> bytes:
        """Reads at most ``max_response_bytes``; beyond, an error body is cut, a result refused."""
        limit = self.config.max_response_bytes
        out = bytearray()
        with translating_transport_errors():
            async for chunk in response.aiter_bytes():
                out += chunk
                if len(out) > limit:
                    if truncate:
                        return bytes(out[:limit])
                    raise AgentProtocolError(f"the Agent Service answer exceeds {limit} bytes")
        return bytes(out)


def _owner_query(user: UserContext) -> str:
    params = {"user_id": user.user_id}
    if user.org_id:
        params["org_id"] = user.org_id
    return urlencode(params)
