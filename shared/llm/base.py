"""The LLM provider interface.

A provider turns a list of messages (and the tools the model may call) into an async stream of
``LLMEvent``s: text deltas as they are generated, reasoning deltas (shown to users as THOUGHT),
complete tool calls (a provider assembles streamed tool-call fragments itself), and one final
``LLMDone`` with token usage. Consumers never see wire formats.

Errors form one tree::

    LLMError
    ├── LLMConnectionError   could not reach the endpoint (retryable)
    ├── LLMTimeoutError      connect/read/first-token timeout (retryable)
    ├── LLMStatusError       the endpoint answered non-2xx (``status_code``; 429/5xx retryable)
    └── LLMProtocolError     the endpoint answered something we cannot parse
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool the model may call: ``parameters`` is a JSON Schema object."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class LLMMessage:
    """One transcript entry, OpenAI-shaped: assistant messages may carry tool calls, tool messages
    carry the result of one call (``tool_call_id``)."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LLMMessage:
        return cls(
            role=data["role"],
            content=data.get("content") or "",
            tool_calls=tuple(
                ToolCall(id=c["id"], name=c["name"], arguments=dict(c.get("arguments") or {}))
                for c in data.get("tool_calls") or ()
            ),
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
        )


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True, slots=True)
class LLMDone:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    # The model that answered, as the endpoint named it (None: it did not say).
    response_model: str | None = None


LLMEvent = TextDelta | ReasoningDelta | ToolCall | LLMDone
# The events that are pieces of streamed text: what arrives of them within a short budget may travel
# on as one (``shared.fastpath.coalesce``).
DELTA_TYPES = (TextDelta, ReasoningDelta)


@dataclass(frozen=True, slots=True)
class CompletionOptions:
    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # What the request is for. A real model reads that from the prompt and an endpoint never sees
    # this; the built-in model, which follows no prompt, picks its behaviour by it.
    purpose: Literal["chat", "summary"] = "chat"


DEFAULT_OPTIONS = CompletionOptions()


@runtime_checkable
class LLMProvider(Protocol):
    name: str

    def stream(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[ToolSpec] = (),
        options: CompletionOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[LLMEvent]:
        """Stream one completion. Ends with exactly one ``LLMDone``."""
        ...

    async def aclose(self) -> None: ...


class LLMError(Exception):
    retryable: bool = False


class LLMConnectionError(LLMError):
    retryable = True


class LLMTimeoutError(LLMError):
    retryable = True


class LLMStatusError(LLMError):
    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(f"LLM endpoint answered {status_code}: {message}")
        self.status_code = status_code
        self.retryable = status_code == 429 or status_code >= 500


class LLMProtocolError(LLMError):
    pass

