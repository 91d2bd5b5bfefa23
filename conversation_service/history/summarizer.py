"""Compression of older history into one summary by the LLM provider.

A backlog is folded chunk by chunk: each call gets the summary so far plus the next messages and
returns the new summary, so a conversation of any length needs a bounded prompt per call, and a
moving window only costs one call over the messages that just left it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from conversation_service.history.tokens import HistoryItem
from conversation_service.settings.history import HistorySettings
from shared.llm.base import (
    CompletionOptions,
    LLMDone,
    LLMError,
    LLMMessage,
    LLMProvider,
    TextDelta,
)
from shared.tokens import truncate_to_tokens

# The instruction a real model follows; the request is also marked purpose="summary" for providers
# (the built-in model) that pick their behaviour without reading prompts.
SUMMARIZE_SYSTEM_PROMPT = (
    "Summarize the conversation below in a few sentences for an assistant that will continue it. "
    "Keep names, numbers, decisions and open questions. Reply with the summary only."
)
# A summary longer than this many characters is not a summary; stop reading the stream there.
_MAX_SUMMARY_CHARS = 64_000


class SummaryError(Exception):
    """Compression failed this time; the caller sends the verbatim window without a summary."""


def plan_chunks(items: Sequence[HistoryItem], counts: Sequence[int], chunk_tokens: int) -> list[list[int]]:
    """Indices of ``items`` grouped into consecutive chunks of at most ``chunk_tokens`` each
    (a single message larger than a chunk gets a chunk of its own and is clipped in the prompt)."""
    chunks: list[list[int]] = []
    current: list[int] = []
    used = 0
    for index, cost in enumerate(counts):
        if current and used + cost > chunk_tokens:
            chunks.append(current)
            current, used = [], 0
        current.append(index)
        used += cost
    if current:
        chunks.append(current)
    return chunks


class Summarizer:
    def __init__(self, llm: LLMProvider, settings: HistorySettings) -> None:
        self._llm = llm
        self._settings = settings
        self._options = CompletionOptions(
            model=settings.summary_model, max_tokens=settings.summary_max_tokens, temperature=0.0, purpose="summary"
        )

    def _transcript(self, previous: str | None, items: Sequence[HistoryItem]) -> str:
        parts = ["Conversation:"]
        if previous:
            parts = [f"Summary of the conversation so far:\n{previous}\n", "Messages that followed:"]
        for item in items:
            # One oversized message must not blow the prompt; the summariser sees its beginning.
            text = truncate_to_tokens(item.content, self._settings.summary_chunk_tokens, self._settings.encoding)
            if len(text) < len(item.content):
                text += " […]"
            parts.append(f"{item.role.value.capitalize()}: {text}")
        return "\n".join(parts)

    async def fold(self, previous: str | None, items: Sequence[HistoryItem]) -> str:
        """The summary of ``previous`` (itself a summary, or None) followed by ``items``."""
        messages = [
            LLMMessage(role="system", content=SUMMARIZE_SYSTEM_PROMPT),
            LLMMessage(role="user", content=self._transcript(previous, items)),
        ]
        pieces: list[str] = []
        size = 0
        try:
            async with asyncio.timeout(self._settings.summary_timeout_seconds):
                stream = self._llm.stream(messages, options=self._options)
                try:
                    async for event in stream:
                        if isinstance(event, TextDelta):
                            pieces.append(event.text)
                            size += len(event.text)
                            if size > _MAX_SUMMARY_CHARS:
                                break
                        elif isinstance(event, LLMDone):
                            break
                finally:
                    aclose = getattr(stream, "aclose", None)
                    if aclose is not None:
                        await aclose()
        except TimeoutError as exc:
            raise SummaryError("summary timed out") from exc
        except LLMError as exc:
            raise SummaryError(f"summary failed: {type(exc).__name__}") from exc
        except Exception as exc:
            # A provider bug must not cost the user the agent: the window still goes out without it.
            raise SummaryError(f"summary failed unexpectedly: {type(exc).__name__}") from exc
        summary = "".join(pieces).strip()
        if not summary:
            raise SummaryError("summary was empty")
        # The provider was asked for at most max_tokens; enforce it, the summary is part of the budget.
        return truncate_to_tokens(summary, self._settings.summary_max_tokens, self._settings.encoding).strip()
