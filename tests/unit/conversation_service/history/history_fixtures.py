"""Builders shared by the history tests: conversations of any length and a deterministic LLM."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta

from conversation_service.history.schemas import HistoryRecord
from conversation_service.history.summarizer import SUMMARIZE_SYSTEM_PROMPT
from shared.llm.base import (
    DEFAULT_OPTIONS,
    CompletionOptions,
    LLMDone,
    LLMEvent,
    LLMMessage,
    LLMStatusError,
    TextDelta,
    ToolSpec,
)

_WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "report",
    "invoice",
    "budget",
    "meeting",
    "plan",
    "data",
    "file",
    "result",
    "total",
]
_T0 = datetime(2026, 1, 1, tzinfo=UTC)


def conversation(n: int, *, seed: int = 7, min_words: int = 3, max_words: int = 40) -> list[HistoryRecord]:
    rng = random.Random(seed)
    return [
        HistoryRecord(
            id=f"m{i:05d}",
            role="user" if i % 2 == 0 else "assistant",
            content=f"#{i} " + " ".join(rng.choice(_WORDS) for _ in range(rng.randint(min_words, max_words))),
            created_at=_T0 + timedelta(seconds=i),
        )
        for i in range(n)
    ]


class ScriptedSummaryLLM:
    """Answers a summarisation request with a summary naming the message numbers it saw.

    Deterministic, so a test can tell exactly which messages each call covered; records every
    prompt; can be told to fail.
    """

    name = "scripted-summary"

    def __init__(self, *, fail: bool = False, reply: str | None = None) -> None:
        self.calls: list[list[LLMMessage]] = []
        self.fail = fail
        self.reply = reply

    async def _events(self, messages: Sequence[LLMMessage], options: CompletionOptions) -> AsyncIterator[LLMEvent]:
        self.calls.append(list(messages))
        if self.fail:
            raise LLMStatusError(503, "unavailable")
        assert messages[0].role == "system" and messages[0].content == SUMMARIZE_SYSTEM_PROMPT
        assert options.purpose == "summary"
        transcript = messages[1].content
        numbers = [token for token in transcript.split() if token.startswith("#")]
        text = self.reply if self.reply is not None else f"covered {' '.join(numbers)}"
        for start in range(0, len(text), 16):
            yield TextDelta(text[start : start + 16])
        yield LLMDone(prompt_tokens=1, completion_tokens=1, finish_reason="stop")

    def stream(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[ToolSpec] = (),
        options: CompletionOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[LLMEvent]:
        return self._events(messages, options)

    async def aclose(self) -> None:
        return None
