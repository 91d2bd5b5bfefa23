"""A model that follows the A2A conformance kit's scenarios (its ``scenarios/*.feature``).

The kit says what it wants through the id of the message it sends (``tck-input-required-...``,
``tck-stream-artifact-chunked-...``), which no real model reads. This model reads it from the
run's context (``agent_service.a2a.context``) and answers as the scenario says: with text (an
answer streamed chunk by chunk), or with a question (``ask_user``). It is an ordinary model
provider to the Agent Service: the A2A layer, the engine and the event log run as in production.

Scenarios that need what a text agent cannot give (a file or data artifact, a reply that is a
Message and no task) get a plain answer; docs/a2a.md lists the kit's tests that fail for it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence

from agent_service.a2a.context import inbound_message_id
from shared.llm.base import (
    DEFAULT_OPTIONS,
    CompletionOptions,
    LLMDone,
    LLMEvent,
    LLMMessage,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolSpec,
)

QUESTION = "What should I do next?"
DEFAULT_ANSWER = "Hello from TCK"
# Longest prefix first: "tck-stream-artifact-chunked" before "tck-stream-...", and so on.
_ANSWERS: dict[str, tuple[str, ...]] = {
    "tck-stream-artifact-chunked": ("chunk-1 ", "chunk-2"),
    "tck-stream-artifact-text": ("Streamed text content",),
    "tck-stream-ordering-001": ("Ordered output",),
    "tck-stream-001": ("Stream hello from TCK",),
    "tck-stream-003": ("Stream task lifecycle",),
    "tck-artifact-text": ("Generated text content",),
    "tck-complete-task": (DEFAULT_ANSWER,),
}
# The long-running scenario: the answer comes after twice the kit's streaming timeout (2 s).
_SLOW_PREFIX = "test-resubscribe-message-id"
_SLOW_SECONDS = 4.0


class ScriptedModel:
    name = "scripted"

    async def aclose(self) -> None:
        return None

    async def stream(
        self, messages: Sequence[LLMMessage], *, tools: Sequence[ToolSpec] = (),
        options: CompletionOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[LLMEvent]:
        message_id = inbound_message_id.get() or ""
        # A reasoning step first: the task shows it is working before its answer streams.
        yield ReasoningDelta("Following the scenario of the message.")
        if message_id.startswith("tck-input-required") and any(tool.name == "ask_user" for tool in tools):
            yield ToolCall(id=f"call_{uuid.uuid4().hex[:24]}", name="ask_user", arguments={"question": QUESTION})
            yield LLMDone(prompt_tokens=len(messages), completion_tokens=1, finish_reason="tool_calls")
            return
        if message_id.startswith(_SLOW_PREFIX):
            await asyncio.sleep(_SLOW_SECONDS)
        chunks = next((text for prefix, text in _ANSWERS.items() if message_id.startswith(prefix)), (DEFAULT_ANSWER,))
        for chunk in chunks:
            yield TextDelta(chunk)
        yield LLMDone(prompt_tokens=len(messages), completion_tokens=len(chunks), finish_reason="stop")
