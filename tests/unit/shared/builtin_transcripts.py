"""Transcripts for the built-in model's tests: messages, tool results and the agent's tool names."""

from __future__ import annotations

import orjson

from shared.llm.base import LLMMessage, ToolCall, ToolSpec

ALL_TOOLS = ["calculator", "knowledge_search", "current_time", "ask_user", "create_file"]


def spec(name: str) -> ToolSpec:
    return ToolSpec(name=name, description=name, parameters={"type": "object", "properties": {}})


def user(text: str) -> LLMMessage:
    return LLMMessage(role="user", content=text)


def assistant(text: str = "", *calls: ToolCall) -> LLMMessage:
    return LLMMessage(role="assistant", content=text, tool_calls=calls)


def tool_result(call: ToolCall, content: object) -> LLMMessage:
    text = content if isinstance(content, str) else orjson.dumps(content).decode()
    return LLMMessage(role="tool", content=text, tool_call_id=call.id, name=call.name)


def only_call(reply) -> ToolCall:
    assert reply.text == ""
    assert len(reply.tool_calls) == 1
    return reply.tool_calls[0]
