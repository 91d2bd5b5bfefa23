"""Models the tests script, as model providers of the service: ``ScriptedModelBase`` holds the
provider interface, a subclass says in ``reply`` what its model streams for a prompt."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from shared.llm.base import (
    DEFAULT_OPTIONS,
    CompletionOptions,
    LLMDone,
    LLMEvent,
    LLMMessage,
    TextDelta,
    ToolCall,
    ToolSpec,
)


class ScriptedModelBase:
    name = "scripted"

    async def aclose(self) -> None:
        return None

    async def stream(
        self, messages: Sequence[LLMMessage], *, tools: Sequence[ToolSpec] = (),
        options: CompletionOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[LLMEvent]:
        async for event in self.reply(messages, tools):
            yield event

    def reply(self, messages: Sequence[LLMMessage], tools: Sequence[ToolSpec]) -> AsyncIterator[LLMEvent]:
        raise NotImplementedError


class ToolCallingModel(ScriptedModelBase):
    """Calls the tools it is given, then answers: for tests of what tools make (artifacts, direct
    replies) through the whole service, whatever the user wrote. The first turn of each run calls
    ``calls`` (``(tool, arguments)`` pairs, in order); the turn after their results streams
    ``answer`` (none: the run ends without answer text)."""

    name = "tool-calling"

    def __init__(self, calls: Sequence[tuple[str, dict[str, Any]]], answer: Sequence[str] = ()) -> None:
        self.calls = list(calls)
        self.answer = list(answer)

    async def reply(self, messages: Sequence[LLMMessage], tools: Sequence[ToolSpec]) -> AsyncIterator[LLMEvent]:
        if messages[-1].role != "tool":
            for index, (tool, arguments) in enumerate(self.calls):
                yield ToolCall(id=f"call-{len(messages)}-{index}", name=tool, arguments=arguments)
            yield LLMDone(prompt_tokens=len(messages), completion_tokens=1, finish_reason="tool_calls")
            return
        for chunk in self.answer:
            yield TextDelta(chunk)
        yield LLMDone(prompt_tokens=len(messages), completion_tokens=len(self.answer) or 1, finish_reason="stop")


class QuotingModel(ToolCallingModel):
    """Calls ``calls`` like ``ToolCallingModel``, then answers with what the tools said: the content
    of each tool message since its last turn, so a test reads a tool's result in the answer."""

    name = "quoting"

    async def reply(self, messages: Sequence[LLMMessage], tools: Sequence[ToolSpec]) -> AsyncIterator[LLMEvent]:
        if messages[-1].role != "tool":
            async for event in super().reply(messages, tools):
                yield event
            return
        results = []
        for message in reversed(messages):
            if message.role != "tool":
                break
            results.append(message.content)
        yield TextDelta("The tools said: " + " | ".join(reversed(results)))
        yield LLMDone(prompt_tokens=len(messages), completion_tokens=1, finish_reason="stop")


class CommandModel(ScriptedModelBase):
    """Calls the tool the user names: ``call <tool> <JSON arguments>`` (after any ``/agent``); then
    answers with what the tool said (``The tools said: ...``). Anything else it answers at once."""

    name = "command"

    async def reply(self, messages: Sequence[LLMMessage], tools: Sequence[ToolSpec]) -> AsyncIterator[LLMEvent]:
        import json

        last = messages[-1]
        if last.role == "tool":
            yield TextDelta(f"The tools said: {last.content}")
        else:
            words = last.content.removeprefix("/agent").strip().split(" ", 2)
            if len(words) >= 2 and words[0] == "call":
                arguments = json.loads(words[2]) if len(words) == 3 else {}
                yield ToolCall(id=f"call-{len(messages)}", name=words[1], arguments=arguments)
                yield LLMDone(prompt_tokens=len(messages), completion_tokens=1, finish_reason="tool_calls")
                return
            yield TextDelta("Nothing to call.")
        yield LLMDone(prompt_tokens=len(messages), completion_tokens=1, finish_reason="stop")
