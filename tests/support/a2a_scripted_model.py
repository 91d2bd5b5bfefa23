"""A model that follows the A2A conformance kit's scenarios (its ``scenarios/*.feature``).

The kit says what it wants through the id of the message it sends (``tck-input-required-...``,
``tck-stream-artifact-chunked-...``), which no real model reads. This model reads it from the
run's context (``agent_service.a2a.context``) and does what the scenario says with the agent's
own tools, as a real model would: answers with text (streamed chunk by chunk), asks with
``ask_user``, writes a file with ``create_file``, hands over a link with ``share_link`` or data with
``emit_data``, or answers with one direct message with ``reply``. It is an ordinary model provider
to the Agent Service: the A2A layer, the engine, the tools and the event log run as in production.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence

from agent_service.a2a.context import inbound_message_id
from shared.llm.base import (
    LLMDone,
    LLMEvent,
    LLMMessage,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolSpec,
)
from tests.support.models import ScriptedModelBase

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
_OUTPUT_TXT = {"name": "output.txt", "media_type": "text/plain"}
# Scenarios whose work is one tool call: the tool and its arguments. Their task is the artifact the
# call makes, with no answer text after it (the scenario's "complete the task").
_CALLS: dict[str, tuple[str, dict]] = {
    "tck-artifact-file-url": ("share_link", {"url": "https://example.com/output.txt", **_OUTPUT_TXT}),
    "tck-artifact-file": ("create_file", {"content": "tck", **_OUTPUT_TXT}),
    "tck-stream-artifact-file": ("create_file", {"content": "tck", **_OUTPUT_TXT}),
    "tck-artifact-data": ("emit_data", {"data": {"key": "value", "count": 42}}),
    "tck-message-response": ("reply", {"text": "Direct message response"}),
}
# The long-running scenario: the answer comes after twice the kit's streaming timeout (2 s).
_SLOW_PREFIX = "test-resubscribe-message-id"
_SLOW_SECONDS = 4.0


class ScriptedModel(ScriptedModelBase):
    name = "tck-scenarios"

    async def reply(self, messages: Sequence[LLMMessage], tools: Sequence[ToolSpec]) -> AsyncIterator[LLMEvent]:
        message_id = inbound_message_id.get() or ""
        # A reasoning step first: the task shows it is working before its answer streams.
        yield ReasoningDelta("Following the scenario of the message.")
        call = ("ask_user", {"question": QUESTION}) if message_id.startswith("tck-input-required") else None
        if call is None and (call := _call_for(message_id)) is not None and messages[-1].role == "tool":
            # The scenario's tool has made its artifact: the turn ends there.
            yield LLMDone(prompt_tokens=len(messages), completion_tokens=0, finish_reason="stop")
            return
        if call is not None and any(tool.name == call[0] for tool in tools):
            yield ToolCall(id=f"call_{uuid.uuid4().hex[:24]}", name=call[0], arguments=call[1])
            yield LLMDone(prompt_tokens=len(messages), completion_tokens=1, finish_reason="tool_calls")
            return
        if message_id.startswith(_SLOW_PREFIX):
            await asyncio.sleep(_SLOW_SECONDS)
        chunks = next((text for prefix, text in _ANSWERS.items() if message_id.startswith(prefix)), (DEFAULT_ANSWER,))
        for chunk in chunks:
            yield TextDelta(chunk)
        yield LLMDone(prompt_tokens=len(messages), completion_tokens=len(chunks), finish_reason="stop")


def _call_for(message_id: str) -> tuple[str, dict] | None:
    prefix = max((p for p in _CALLS if message_id.startswith(p)), key=len, default=None)
    return _CALLS[prefix] if prefix is not None else None
