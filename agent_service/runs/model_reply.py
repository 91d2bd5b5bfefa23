"""``ModelReply``: one model call's reply, taken event by event as it streams.

Answer text is emitted chunk by chunk as it arrives (``ANSWER_CHUNK``); reasoning is held back and
emitted as one ``THOUGHT`` before the next text or tool call (or at the end), since a thought cut
into tokens reads as noise; tool calls are collected for the engine to run; the final ``LLMDone``
carries the provider's token counts, when it sends them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel

from shared.llm.base import LLMDone, ReasoningDelta, TextDelta, ToolCall
from shared.protocol import AnswerChunkData, EventType, ThoughtData

Emit = Callable[[EventType, BaseModel], Any]


class ModelReply:
    __slots__ = ("_emit", "_on_chunk", "_reasoning", "_step", "calls", "done", "text")

    def __init__(self, emit: Emit, step: int, on_chunk: Callable[[str], Awaitable[None]] | None = None) -> None:
        self._emit = emit
        self._step = step
        self._on_chunk = on_chunk  # the answer_chunk hooks, when any are loaded
        self._reasoning: list[str] = []
        self.text: list[str] = []
        self.calls: list[ToolCall] = []
        self.done: LLMDone | None = None

    @property
    def content(self) -> str:
        return "".join(self.text)

    async def take(self, event: object) -> None:
        if isinstance(event, TextDelta):
            if event.text:
                await self._answer_chunk(event.text)
        elif isinstance(event, ReasoningDelta):
            self._reasoning.append(event.text)
        elif isinstance(event, ToolCall):
            self.end_reasoning()
            self.calls.append(event)
        elif isinstance(event, LLMDone):
            self.done = event

    async def _answer_chunk(self, text: str) -> None:
        self.end_reasoning()
        self.text.append(text)
        # A reader that keeps up has the chunk on its socket when emit returns (see EventLog).
        behind = self._emit(EventType.ANSWER_CHUNK, AnswerChunkData(text=text))
        if behind is not None:
            await behind  # the event log waits for its database: so does the model stream
        if self._on_chunk is not None:
            await self._on_chunk(text)

    def end_reasoning(self) -> None:
        if self._reasoning:
            self._emit(EventType.THOUGHT, ThoughtData(text="".join(self._reasoning), step=self._step))
            self._reasoning.clear()
