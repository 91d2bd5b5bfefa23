"""``A2AAgentClient``: one configured A2A agent, reached over the binding its card names.

One pooled ``httpx.AsyncClient`` per agent (an upstream of its own), without redirects (they would
carry the credential elsewhere). Every request sends ``A2A-Version: 1.0`` and the agent's credential;
its errors are the ``AgentServiceError`` tree of ``agent_client`` (transport errors translated in its
one place), so breaker, retries, fallback and dead letters treat an A2A agent as the Agent Service.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson

from conversation_service.a2a_agents.bindings import (
    CANCEL,
    GET_TASK,
    PROTOCOL_VERSION,
    SEND_STREAM,
    SUBSCRIBE,
    VERSION_HEADER,
    Binding,
    JsonRpcBinding,
    binding_for,
)
from conversation_service.a2a_agents.card import CardCache, ResolvedCard
from conversation_service.a2a_agents.wire import (
    StreamEvent,
    TaskSnapshot,
    jsonrpc_error,
    parse_stream_response,
    parse_task,
)
from conversation_service.agent_client.config import AgentClientConfig
from conversation_service.agent_client.connection import SSEConnection
from conversation_service.agent_client.errors import (
    AgentProtocolError,
    AgentTimeoutError,
    translating_transport_errors,
)
from conversation_service.agent_client.retry import Sleep, call_with_retries
from conversation_service.settings.a2a_agents import A2AAgentConfig
from shared.sse import SSE_MEDIA_TYPE
from shared.storable import NUL_IN_JSON, storable


class A2AStream:
    """One SSE answer of an A2A agent, read as parsed stream events (``None``: the body ended)."""

    def __init__(self, connection: SSEConnection, binding: Binding) -> None:
        self._connection = connection
        self._binding = binding

    @property
    def cut_mid_event(self) -> bool:
        return self._connection.cut_mid_event

    async def next(self) -> StreamEvent | None:
        sse = await self._connection.next_event()
        if sse is None:
            return None
        return parse_stream_response(self._binding.unwrap(event_payload(sse.data)))

    async def aclose(self) -> None:
        await self._connection.aclose()


class A2AAgentClient:
    def __init__(
        self, config: A2AAgentConfig, client_config: AgentClientConfig, *, card_cache_s: float,
        transport: httpx.AsyncBaseTransport | None = None, sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.config = config
        self.client_config = client_config
        self.sleep = sleep
        c = client_config
        self._http = httpx.AsyncClient(
            transport=transport, follow_redirects=False,
            limits=httpx.Limits(max_connections=c.max_connections, max_keepalive_connections=c.max_keepalive_connections),
            timeout=httpx.Timeout(connect=c.connect_timeout, read=c.read_timeout, write=c.write_timeout,
                                  pool=c.pool_timeout),
        )
        self.cards = CardCache(config, self._http, max_age_s=card_cache_s, timeout_s=c.request_timeout)

    @property
    def name(self) -> str:
        return self.config.name

    def __repr__(self) -> str:
        return f"<A2AAgentClient {self.config.name} {self.config.card_url}>"

    async def aclose(self) -> None:
        await self._http.aclose()

    async def card(self) -> ResolvedCard:
        return await self.cards.get()

    async def send(self, message: dict[str, Any], metadata: dict[str, Any] | None,
                   deadline: float | None) -> A2AStream:
        """``SendStreamingMessage``: the task's events as they come (the first is the task, or a Message)."""
        params: dict[str, Any] = {"message": message, "configuration": {"acceptedOutputModes": ["text/plain",
                                                                                              "text/markdown"]}}
        if metadata:
            params["metadata"] = metadata
        return await self._stream(SEND_STREAM, params, deadline)

    async def subscribe(self, task_id: str, deadline: float | None) -> A2AStream:
        """``SubscribeToTask``: the task as it stands now, then its later events."""
        return await self._stream(SUBSCRIBE, {"id": task_id}, deadline)

    async def cancel(self, task_id: str) -> None:
        """``CancelTask``; a task that cannot be canceled any more (it ended) is ``AgentConflictError``."""
        await self._call_json(CANCEL, {"id": task_id})

    async def get_task(self, task_id: str) -> TaskSnapshot:
        body = await self._call_json(GET_TASK, {"id": task_id})
        if not isinstance(body, dict):
            raise AgentProtocolError("the A2A agent answered GetTask without a task")
        return parse_task(body)

    async def _binding(self) -> Binding:
        card = await self.card()
        return binding_for(card.binding, card.url)

    def _headers(self, *, stream: bool) -> dict[str, str]:
        return {VERSION_HEADER: PROTOCOL_VERSION, "Accept": SSE_MEDIA_TYPE if stream else "application/json",
                "Accept-Encoding": "identity", "Content-Type": "application/json", **self.config.auth_headers()}

    def _request(self, binding: Binding, operation: str, params: dict[str, Any], *, stream: bool) -> httpx.Request:
        call = binding.call(operation, params)
        c = self.client_config
        # A stream's reads are watched by ``SSEConnection``'s own timer, not by httpx's.
        timeout = httpx.Timeout(connect=c.connect_timeout, read=None if stream else c.read_timeout,
                                write=c.write_timeout, pool=c.pool_timeout)
        return self._http.build_request(call.method, call.url, headers=self._headers(stream=stream), timeout=timeout,
                                        content=orjson.dumps(call.body) if call.body is not None else None)

    async def _stream(self, operation: str, params: dict[str, Any], deadline: float | None) -> A2AStream:
        binding = await self._binding()
        request = self._request(binding, operation, params, stream=True)
        with translating_transport_errors():
            response = await self._http.send(request, stream=True)
        try:
            media_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if response.status_code != 200 or media_type != SSE_MEDIA_TYPE:
                # An error answer, or JSON-RPC's error sent as a plain JSON answer.
                raise self._error(binding, response.status_code, await self._read(response), media_type)
        except BaseException:
            await response.aclose()
            raise
        connection = SSEConnection(response, self.client_config.max_event_bytes, idle_s=self.client_config.read_timeout,
                                   deadline=deadline)
        return A2AStream(connection, binding)

    async def _call_json(self, operation: str, params: dict[str, Any]) -> Any:
        async def attempt() -> Any:
            binding = await self._binding()
            try:
                async with asyncio.timeout(self.client_config.request_timeout):
                    with translating_transport_errors():
                        response = await self._http.send(self._request(binding, operation, params, stream=False),
                                                         stream=True)
                    try:
                        body = await self._read(response)
                    finally:
                        await response.aclose()
            except TimeoutError as exc:
                raise AgentTimeoutError(f"{operation} got no answer within {self.client_config.request_timeout} s") \
                    from exc
            payload = _json(body)
            if response.status_code != 200:
                raise binding.error(response.status_code, payload)
            return binding.unwrap(payload)

        return await call_with_retries(operation, attempt, config=self.client_config, sleep=self.sleep)

    @staticmethod
    def _error(binding: Binding, status: int, body: bytes, media_type: str):
        payload = _json(body)
        if status != 200:
            return binding.error(status, payload)
        if isinstance(binding, JsonRpcBinding) and isinstance(payload, dict) and "error" in payload:
            return jsonrpc_error(payload["error"])  # JSON-RPC answers an error as a plain JSON answer
        return AgentProtocolError(f"the A2A agent answered a stream with {media_type or 'no content type'}")

    async def _read(self, response: httpx.Response) -> bytes:
        limit = self.client_config.max_response_bytes
        out = bytearray()
        with translating_transport_errors():
            async for chunk in response.aiter_bytes():
                out += chunk
                if len(out) > limit:
                    raise AgentProtocolError(f"the A2A agent's answer exceeds {limit} bytes")
        return bytes(out)


def event_payload(data: str) -> Any:
    """An A2A event's JSON; a NUL the remote agent sent becomes U+FFFD (``shared.storable``)."""
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise AgentProtocolError("invalid A2A event: not JSON") from exc
    return storable(payload) if NUL_IN_JSON in data else payload


def _json(body: bytes) -> Any:
    if not body:
        return None
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return storable(value) if NUL_IN_JSON.encode() in body else value
