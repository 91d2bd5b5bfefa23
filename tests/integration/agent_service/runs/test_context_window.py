"""A session whose transcript is far over the profile's context keeps answering: the model receives
a window of it within the budget, and the session keeps the whole transcript."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from agent_service.models import AgentSession
from agent_service.tools.calculator import CalculatorTool
from shared.llm.openai import OpenAICompatibleProvider
from shared.tokens import TOKENS_PER_REPLY, count_message_tokens, count_tokens
from tests.support.fake_openai import FakeOpenAI, TextReply, ToolCallReply, running_fake_openai

MAX_CONTEXT_TOKENS = 700
MAX_TOKENS = 100
PROFILES = f"""
profiles:
  - name: default
    system_prompt: You are a helpful assistant. Use the calculator for arithmetic.
    tools: [calculator]
    max_steps: 4
    max_tokens: {MAX_TOKENS}
    max_context_tokens: {MAX_CONTEXT_TOKENS}
"""


class _Tools:
    def get(self, name: str):
        return CalculatorTool() if name == "calculator" else None


def _prompt_tokens(body: dict[str, Any]) -> int:
    """Prompt tokens of a chat-completions request as received: messages, tool calls and tool definitions."""
    tokens = TOKENS_PER_REPLY + count_tokens(orjson.dumps(body.get("tools") or []).decode())
    for message in body["messages"]:
        tokens += count_message_tokens(message["role"], message.get("content") or "")
        for call in message.get("tool_calls") or ():
            tokens += count_tokens(call["function"]["name"]) + count_tokens(call["function"]["arguments"])
    return tokens


async def test_a_session_far_over_its_context_still_answers_within_the_budget(agent_factory, db, tmp_path: Path) -> None:
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(PROFILES)
    # Sixty earlier messages of ~40 tokens: about four times the profile's whole context.
    history = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"earlier message {i}: " + "lorem ipsum " * 16}
        for i in range(60)
    ]
    fake = FakeOpenAI()
    fake.enqueue(
        ToolCallReply(calls=[("calculator", {"expression": "17*23"})]),
        TextReply(text="17 times 23 is 391."),
        TextReply(text="Still here."),
    )
    async with running_fake_openai(fake) as (_, api_root):
        provider = OpenAICompatibleProvider(base_url=api_root, model="fake-model", api_key="sk-test")
        try:
            async with agent_factory(provider=provider, tools=_Tools(), profiles_file=profiles) as agent:
                first = await agent.execute("what is 17*23", body={"chat_history": history})
                session_id = first.last.session_id
                second = await agent.execute("are you still there?", body={"session_id": session_id})
        finally:
            await provider.aclose()

    assert first.last.type.value == "COMPLETE" and first.last.data["answer"] == "17 times 23 is 391."
    assert second.last.type.value == "COMPLETE" and second.last.data["answer"] == "Still here."
    assert len(fake.requests) == 3
    first_call, after_tool, next_message = (r.body["messages"] for r in fake.requests)
    for request in fake.requests:
        messages = request.body["messages"]
        assert _prompt_tokens(request.body) <= MAX_CONTEXT_TOKENS - MAX_TOKENS
        assert messages[0]["role"] == "system" and messages[0]["content"].startswith("You are a helpful assistant.")
        # The window drops old turns but keeps the newest ones.
        assert messages[1]["role"] == "user" and len(messages) > 3
    assert first_call[-1] == {"role": "user", "content": "what is 17*23"}
    assert first_call[-3]["content"] == history[-2]["content"]
    # The current turn travels whole: the question, the tool call and its result.
    assert [m["role"] for m in after_tool[-3:]] == ["user", "assistant", "tool"]
    assert orjson.loads(after_tool[-1]["content"])["result"] == 391
    assert next_message[-1] == {"role": "user", "content": "are you still there?"}
    assert next_message[-2] == {"role": "assistant", "content": "17 times 23 is 391."}

    # The session keeps every message: system, history, two turns (one with a tool call and result).
    async with db.sessionmaker() as session:
        transcript = (await session.get(AgentSession, session_id)).transcript
    assert len(transcript) == 1 + len(history) + 4 + 2
    assert [m["content"] for m in transcript[1 : 1 + len(history)]] == [m["content"] for m in history]
