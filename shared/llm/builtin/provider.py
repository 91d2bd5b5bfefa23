"""``BuiltinProvider``: the built-in model behind the ``LLMProvider`` interface, paced like a model."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Sequence

import orjson

from shared.llm.base import (
    DEFAULT_OPTIONS,
    CompletionOptions,
    LLMDone,
    LLMEvent,
    LLMMessage,
    ReasoningDelta,
    TextDelta,
    ToolSpec,
)
from shared.llm.builtin.model import decide
from shared.tokens import count_messages_tokens, count_tokens, truncate_to_tokens


class BuiltinProvider:
    name = "builtin"

    def __init__(self, *, first_token_delay: float = 0.15, chunk_delay: float = 0.015) -> None:
        if first_token_delay < 0 or chunk_delay < 0:
            raise ValueError("delays must be >= 0")
        self.first_token_delay = first_token_delay
        self.chunk_delay = chunk_delay

    async def aclose(self) -> None:
        return None

    async def stream(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[ToolSpec] = (),
        options: CompletionOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[LLMEvent]:
        reply = decide(messages, [tool.name for tool in tools], purpose=options.purpose)
        text = reply.text
        if options.max_tokens is not None and count_tokens(text) > options.max_tokens:
            text = truncate_to_tokens(text, options.max_tokens)
        # Pacing is the simulated model's latency, so the product's streaming is visible end to end.
        await asyncio.sleep(self.first_token_delay)
        deltas = [ReasoningDelta(word) for word in _words(reply.reasoning)] + [TextDelta(word) for word in _words(text)]
        for index, delta in enumerate(deltas):
            if index:
                await asyncio.sleep(self.chunk_delay)
            yield delta
        for call in reply.tool_calls:
            yield call
        generated = reply.reasoning + text + "".join(orjson.dumps(c.arguments).decode() for c in reply.tool_calls)
        yield LLMDone(
            prompt_tokens=count_messages_tokens([(m.role, m.content) for m in messages]),
            completion_tokens=count_tokens(generated),
            finish_reason="tool_calls" if reply.tool_calls else "stop",
        )


def _words(text: str) -> list[str]:
    """One word a chunk, keeping every character (the whitespace after a word goes with it)."""
    return re.findall(r"\S+\s*|\s+", text)
