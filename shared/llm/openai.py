"""A provider for any OpenAI-compatible ``/v1/chat/completions`` endpoint, streamed.

Works with OpenAI, vLLM, Ollama, the llama.cpp server and LiteLLM: it sends ``stream: true`` with
``stream_options.include_usage`` and function tools, and reads the server-sent chunks back into
``LLMEvent``s. Tool calls arrive as fragments spread over many chunks (``index`` says which call a
fragment belongs to, the JSON arguments come a few characters at a time); they are assembled here
and emitted whole when the choice finishes. Transport and HTTP failures are translated in one place
(``_translate``) onto the ``LLMError`` tree of ``shared.llm.base``. The provider's own client reads
through ``shared.fastpath.aiohttp_transport`` (a token per chunk, parsed in C).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
from pydantic import SecretStr

from shared.fastpath.aiohttp_transport import AiohttpTransport
from shared.llm.base import (
    DEFAULT_OPTIONS,
    CompletionOptions,
    LLMConnectionError,
    LLMDone,
    LLMError,
    LLMEvent,
    LLMMessage,
    LLMProtocolError,
    LLMStatusError,
    LLMTimeoutError,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolSpec,
)
from shared.llm.capacity import ConnectionSlots
from shared.llm.openai_sse import check_event_stream, iter_data
from shared.tokens import count_messages_tokens, count_tokens

__all__ = ["OpenAICompatibleProvider", "to_openai_messages", "to_openai_tools"]

logger = logging.getLogger(__name__)

# Bounds on what a (possibly misbehaving) endpoint can make us hold in memory.
MAX_TOOL_CALLS = 64
MAX_TOOL_ARGUMENT_CHARS = 256_000
MAX_ERROR_BODY_BYTES = 16_000
MAX_ERROR_MESSAGE_CHARS = 500


def to_openai_messages(messages: Sequence[LLMMessage]) -> list[dict[str, Any]]:
    """``LLMMessage``s in the chat-completions wire format."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            out.append({"role": "tool", "tool_call_id": message.tool_call_id or "", "content": message.content})
            continue
        item: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.role == "assistant" and message.tool_calls:
            # OpenAI wants null content beside tool calls when the model said nothing.
            item["content"] = message.content or None
            item["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": orjson.dumps(call.arguments).decode()},
                }
                for call in message.tool_calls
            ]
        if message.name is not None and message.role in ("system", "user", "assistant"):
            item["name"] = message.name
        out.append(item)
    return out


def to_openai_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
        }
        for tool in tools
    ]


@dataclass
class _PartialToolCall:
    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    size: int = 0


@dataclass
class _StreamState:
    """What one streamed completion has produced so far."""

    partial_calls: dict[int, _PartialToolCall] = field(default_factory=dict)
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    generated: list[str] = field(default_factory=list)
    done: bool = False
    model: str | None = None


class OpenAICompatibleProvider:
    """Streams chat completions from an OpenAI-compatible endpoint.

    ``http_client`` is a pooled client for this upstream with at least ``max_connections``
    connections; the timeouts are applied per request, so a shared client with other defaults
    still gets this provider's limits. Without one the provider owns one (on ``transport``, by
    default an ``AiohttpTransport``) and closes it in ``aclose``.

    At most ``max_connections`` calls stream at once (``slots``); the others wait their turn for up
    to ``request_timeout`` seconds.
    """

    name = "openai"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: SecretStr | str | None = None,
        http_client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 60.0,
        request_timeout: float = 60.0,
        max_connections: int = 100,
        slots: ConnectionSlots | None = None,
    ) -> None:
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._model = model
        secret = api_key.get_secret_value() if isinstance(api_key, SecretStr) else api_key
        self._headers = {"Accept": "text/event-stream"}
        if secret:
            self._headers["Authorization"] = f"Bearer {secret}"
        self._request_timeout = request_timeout
        self.slots = slots or ConnectionSlots(max_connections)
        # The slots keep this provider within the pool, so the pool's own wait is only a backstop.
        self._timeout = httpx.Timeout(
            connect=connect_timeout, read=read_timeout, write=read_timeout, pool=request_timeout
        )
        self._owns_client = http_client is None
        self._client = http_client or httpx.AsyncClient(
            transport=transport or AiohttpTransport(max_connections=self.slots.limit))

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAICompatibleProvider(url={self._url!r}, model={self._model!r})"

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    def _body(
        self, messages: Sequence[LLMMessage], tools: Sequence[ToolSpec], options: CompletionOptions
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": options.model or self._model,
            "messages": to_openai_messages(messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = to_openai_tools(tools)
        if options.max_tokens is not None:
            body["max_tokens"] = options.max_tokens
        if options.temperature is not None:
            body["temperature"] = options.temperature
        body.update(options.extra)
        return body

    async def stream(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[ToolSpec] = (),
        options: CompletionOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[LLMEvent]:
        state = _StreamState()
        started = time.monotonic()
        try:
            async with self.slots.slot(self._request_timeout), self._client.stream(
                "POST",
                self._url,
                content=orjson.dumps(self._body(messages, tools, options)),
                headers={**self._headers, "Content-Type": "application/json"},
                timeout=self._timeout,
            ) as response:
                if not response.is_success:
                    raise LLMStatusError(response.status_code, await _error_message(response))
                problem = check_event_stream(response)
                if problem is not None:
                    raise LLMProtocolError(f"the LLM endpoint did not answer with an event stream: {problem}")
                async for data in iter_data(response):
                    if data == b"[DONE]":
                        state.done = True
                        break
                    if not data:
                        continue
                    for event in self._handle_chunk(data, state):
                        yield event
        except LLMError as exc:
            logger.warning("llm request failed", extra={"error": type(exc).__name__, "url": self._url})
            raise
        except httpx.HTTPError as exc:
            translated = _translate(exc)
            logger.warning(
                "llm request failed",
                extra={"error": type(translated).__name__, "detail": str(exc), "url": self._url},
            )
            raise translated from exc

        if not state.done and state.finish_reason is None:
            # The connection closed cleanly but mid-answer: the completion is incomplete.
            raise LLMConnectionError("the LLM stream ended before the completion finished")
        for call in self._flush_tool_calls(state):
            yield call
        prompt_tokens = state.prompt_tokens
        if prompt_tokens is None:
            prompt_tokens = count_messages_tokens([(m.role, m.content) for m in messages])
        completion_tokens = state.completion_tokens
        if completion_tokens is None:
            completion_tokens = count_tokens("".join(state.generated))
        logger.info(
            "llm completion",
            extra={
                "duration_ms": round((time.monotonic() - started) * 1000),
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "finish_reason": state.finish_reason,
            },
        )
        yield LLMDone(
            prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, finish_reason=state.finish_reason,
            response_model=state.model,
        )

    def _handle_chunk(self, data: bytes | str, state: _StreamState) -> list[LLMEvent]:
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise LLMProtocolError(f"the LLM stream sent a chunk that is not JSON: {exc}") from exc
        if not isinstance(chunk, dict):
            raise LLMProtocolError("the LLM stream sent a chunk that is not a JSON object")
        if "error" in chunk:
            # vLLM and LiteLLM report failures inside an already-open 200 stream.
            status, message = _error_from_payload(chunk)
            raise LLMStatusError(status or 502, message)
        if state.model is None and isinstance(chunk.get("model"), str):
            state.model = chunk["model"]
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            if isinstance(usage.get("prompt_tokens"), int):
                state.prompt_tokens = usage["prompt_tokens"]
            if isinstance(usage.get("completion_tokens"), int):
                state.completion_tokens = usage["completion_tokens"]
        events: list[LLMEvent] = []
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise LLMProtocolError("the LLM stream sent 'choices' that is not a list")
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # only one choice is ever requested
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise LLMProtocolError("the LLM stream sent a 'delta' that is not an object")
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                state.generated.append(reasoning)
                events.append(ReasoningDelta(reasoning))
            content = delta.get("content")
            if isinstance(content, str) and content:
                state.generated.append(content)
                events.append(TextDelta(content))
            for fragment in delta.get("tool_calls") or ():
                self._add_tool_fragment(fragment, state)
            if choice.get("finish_reason"):
                state.finish_reason = str(choice["finish_reason"])
                events.extend(self._flush_tool_calls(state))
        return events

    @staticmethod
    def _add_tool_fragment(fragment: Any, state: _StreamState) -> None:
        if not isinstance(fragment, dict):
            raise LLMProtocolError("the LLM stream sent a tool-call fragment that is not an object")
        index = fragment.get("index", 0)
        if not isinstance(index, int) or index < 0:
            raise LLMProtocolError("the LLM stream sent a tool-call fragment without a valid index")
        partial = state.partial_calls.get(index)
        if partial is None:
            if len(state.partial_calls) >= MAX_TOOL_CALLS:
                raise LLMProtocolError(f"the LLM asked for more than {MAX_TOOL_CALLS} tool calls at once")
            partial = state.partial_calls[index] = _PartialToolCall()
        if fragment.get("id"):
            partial.id = str(fragment["id"])
        function = fragment.get("function") or {}
        if not isinstance(function, dict):
            raise LLMProtocolError("the LLM stream sent a tool-call 'function' that is not an object")
        if function.get("name") and not partial.name:
            partial.name = str(function["name"])
        arguments = function.get("arguments")
        if arguments:
            if not isinstance(arguments, str):
                # A few servers send the arguments already parsed.
                arguments = orjson.dumps(arguments).decode()
            partial.size += len(arguments)
            if partial.size > MAX_TOOL_ARGUMENT_CHARS:
                raise LLMProtocolError("the LLM sent tool-call arguments larger than allowed")
            partial.arguments.append(arguments)

    @staticmethod
    def _flush_tool_calls(state: _StreamState) -> list[ToolCall]:
        calls: list[ToolCall] = []
        for index in sorted(state.partial_calls):
            partial = state.partial_calls[index]
            if not partial.name:
                raise LLMProtocolError(f"the LLM sent tool call #{index} without a function name")
            raw = "".join(partial.arguments).strip() or "{}"
            try:
                arguments = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise LLMProtocolError(
                    f"the LLM sent invalid JSON arguments for tool {partial.name!r}: {exc}"
                ) from exc
            if not isinstance(arguments, dict):
                raise LLMProtocolError(f"the LLM sent arguments for tool {partial.name!r} that are not an object")
            state.generated.append(raw)
            # Some local servers omit ids; the run engine still needs one to pair call and result.
            call_id = partial.id or f"call_{uuid.uuid4().hex[:24]}"
            calls.append(ToolCall(id=call_id, name=partial.name, arguments=arguments))
        state.partial_calls.clear()
        return calls


def _error_from_payload(payload: Any) -> tuple[int | None, str]:
    """(status, message) out of the usual error bodies: ``{"error": {"message", "code"}}``,
    ``{"error": "..."}`` (Ollama, llama.cpp) or ``{"detail": ...}`` (FastAPI-based proxies)."""
    status: int | None = None
    message: Any = None
    if isinstance(payload, dict):
        error = payload.get("error", payload.get("detail"))
        if isinstance(error, dict):
            message = error.get("message") or error.get("msg")
            code = error.get("code")
            if isinstance(code, int) and 400 <= code <= 599:
                status = code
        elif error is not None:
            message = error
    if message is None:
        message = "unknown error"
    text = message if isinstance(message, str) else orjson.dumps(message).decode()
    return status, text[:MAX_ERROR_MESSAGE_CHARS]


async def _error_message(response: httpx.Response) -> str:
    body = b""
    async for part in response.aiter_bytes():
        body += part
        if len(body) >= MAX_ERROR_BODY_BYTES:
            break
    try:
        return _error_from_payload(orjson.loads(body))[1]
    except orjson.JSONDecodeError:
        text = body.decode("utf-8", "replace").strip()
        return (text or response.reason_phrase or "no body")[:MAX_ERROR_MESSAGE_CHARS]


def _translate(exc: Exception) -> LLMError:
    """The one place transport failures become ``LLMError``s."""
    if isinstance(exc, httpx.TimeoutException):
        kind = {
            httpx.ConnectTimeout: "connecting to",
            httpx.ReadTimeout: "waiting for data from",
            httpx.WriteTimeout: "sending to",
            httpx.PoolTimeout: "waiting for a free connection to",
        }.get(type(exc), "talking to")
        return LLMTimeoutError(f"timed out {kind} the LLM endpoint")
    if isinstance(exc, httpx.ConnectError):
        return LLMConnectionError(f"could not connect to the LLM endpoint: {exc}")
    if isinstance(exc, httpx.TransportError):
        return LLMConnectionError(f"the connection to the LLM endpoint failed: {type(exc).__name__}")
    return LLMProtocolError(f"unexpected HTTP failure: {type(exc).__name__}")
