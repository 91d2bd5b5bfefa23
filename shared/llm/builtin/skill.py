"""What a skill of the built-in model is, and what it reads and writes.

A ``Skill`` reads one ``Turn`` (the user's last message, what came before it, the tools the request
offers) and either answers it, calls its tool, or passes. A skill that calls a tool also turns that
tool's ``ToolResult`` back into the answer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from shared.llm.base import LLMMessage, ToolCall


@dataclass(frozen=True)
class BuiltinReply:
    """What the model decided to say: reasoning, answer text and tool calls (any may be empty)."""

    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Turn:
    text: str  # the user's last message
    history: Sequence[LLMMessage]  # everything before it
    tools: frozenset[str]  # the names of the tools the request offers
    seed: str  # a digest of the whole transcript

    def offers(self, tool: str) -> bool:
        return tool in self.tools

    def previous_answer(self) -> LLMMessage | None:
        return next((m for m in reversed(self.history) if m.role == "assistant"), None)

    def call(self, tool: str, arguments: dict[str, Any], *, reasoning: str) -> BuiltinReply:
        # The id comes from the transcript, so the same input gives the same call and a new turn a new id.
        call_id = f"call_{hashlib.sha256(f'{self.seed}:0:{tool}'.encode()).hexdigest()[:24]}"
        call = ToolCall(id=call_id, name=tool, arguments=arguments)
        return BuiltinReply(reasoning=reasoning, tool_calls=(call,))


@dataclass(frozen=True)
class ToolResult:
    arguments: dict[str, Any]  # what the model called the tool with
    value: Any  # the result, parsed from JSON when it is JSON
    error: str | None  # what went wrong, when the tool failed
    request: str  # the user message the call served


@dataclass(frozen=True)
class Skill:
    """``respond`` answers the turn, calls ``tool`` or passes (None); ``answer`` reads a result of
    ``tool`` into the reply (None: a result it cannot read)."""

    respond: Callable[[Turn], BuiltinReply | None]
    tool: str | None = None
    answer: Callable[[ToolResult], str | None] | None = None


def title(words: str) -> str:
    return " ".join(part[:1].upper() + part[1:] for part in words.split())
