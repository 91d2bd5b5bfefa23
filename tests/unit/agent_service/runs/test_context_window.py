"""The prompt window over a run's transcript: what it keeps, what it drops, when it gives up, and
what it counts."""

from __future__ import annotations

from typing import Any

import pytest

from agent_service.profiles.schemas import Profile
from agent_service.runs import context_window
from agent_service.runs.context_window import MARGIN_TOKENS, ContextWindow, message_bytes, message_tokens
from agent_service.runs.state import Failed, RunState
from shared.llm.base import LLMMessage, ToolCall, ToolSpec
from shared.protocol import ErrorCode
from shared.tokens import TOKENS_PER_REPLY

SYSTEM = LLMMessage(role="system", content="You are a helpful assistant.")
MEMORY = LLMMessage(role="system", content="What the user told you before: likes green.")


def _profile(max_context_tokens: int | None, max_tokens: int | None = 100) -> Profile:
    return Profile(name="p", system_prompt="sys", max_context_tokens=max_context_tokens, max_tokens=max_tokens)


def _context_for(budget: int, max_tokens: int = 100) -> int:
    """The ``max_context_tokens`` that leaves ``budget`` tokens for the prompt."""
    return budget + max_tokens + MARGIN_TOKENS


def _plain_turn(i: int) -> list[LLMMessage]:
    return [LLMMessage(role="user", content=f"question {i} " * 20), LLMMessage(role="assistant", content=f"answer {i} " * 20)]


def _tool_turn(i: int) -> list[LLMMessage]:
    calls = (ToolCall(f"a{i}", "add", {"a": i, "b": 1}), ToolCall(f"b{i}", "add", {"a": i, "b": 2}))
    return [
        LLMMessage(role="user", content=f"add things {i} " * 10),
        LLMMessage(role="assistant", content="", tool_calls=calls),
        LLMMessage(role="tool", content=f'{{"result": {i + 1}}} ' * 10, tool_call_id=f"a{i}", name="add"),
        LLMMessage(role="tool", content=f'{{"result": {i + 2}}} ' * 10, tool_call_id=f"b{i}", name="add"),
        LLMMessage(role="assistant", content=f"the sums are {i + 1} and {i + 2}"),
    ]


def _tokens(messages: list[LLMMessage]) -> int:
    return TOKENS_PER_REPLY + sum(message_tokens(m) for m in messages)


async def _prompt(state: RunState, budget: int) -> list[LLMMessage] | Failed:
    return await ContextWindow(_profile(_context_for(budget))).prompt(state)


async def test_a_prompt_within_the_budget_is_the_whole_transcript_with_the_memory_after_the_system_prompt() -> None:
    turns = [m for i in range(3) for m in _plain_turn(i)]
    state = RunState(transcript=[SYSTEM, *turns, LLMMessage(role="user", content="hi")], context=[MEMORY])
    assert await _prompt(state, 10_000) == [SYSTEM, MEMORY, *turns, state.transcript[-1]]
    unlimited = await ContextWindow(_profile(None)).prompt(state)
    assert unlimited == [SYSTEM, MEMORY, *turns, state.transcript[-1]]


async def test_keeps_the_system_messages_and_drops_the_oldest_whole_turns_first() -> None:
    turns = [_plain_turn(i) for i in range(10)]
    current = LLMMessage(role="user", content="what was the last answer?")
    state = RunState(transcript=[SYSTEM, *(m for t in turns for m in t), current], context=[MEMORY])
    turn_cost = _tokens(turns[0]) - TOKENS_PER_REPLY
    fixed = _tokens([SYSTEM, MEMORY, current])
    prompt = await _prompt(state, fixed + 3 * turn_cost + turn_cost // 2)
    assert not isinstance(prompt, Failed)
    # Room for three and a half turns: the three newest, whole.
    assert prompt == [SYSTEM, MEMORY, *turns[7], *turns[8], *turns[9], current]
    assert _tokens(prompt) <= fixed + 3 * turn_cost + turn_cost // 2


@pytest.mark.parametrize("budget", range(150, 1400, 19))
async def test_tool_calls_and_their_results_stay_together_and_the_latest_message_is_always_there(budget: int) -> None:
    turns = [m for i in range(6) for m in (_tool_turn(i) if i % 2 else _plain_turn(i))]
    state = RunState(transcript=[SYSTEM, *turns, *_tool_turn(99)])
    prompt = await _prompt(state, budget)
    if isinstance(prompt, Failed):
        assert budget < _tokens([SYSTEM, *_tool_turn(99)])
        return
    assert _tokens(prompt) <= budget
    assert prompt[0] == SYSTEM and prompt[1].role == "user"
    assert prompt[-5:] == _tool_turn(99)  # the current turn, whole
    for i, message in enumerate(prompt):
        if message.role == "tool":
            callers = [m for m in prompt[:i] if any(c.id == message.tool_call_id for c in m.tool_calls)]
            assert len(callers) == 1
        for call in message.tool_calls:
            assert any(m.tool_call_id == call.id for m in prompt[i + 1 :])


async def test_the_window_never_opens_on_a_tool_result_without_its_call() -> None:
    # A history that starts with a tool result (its call was never stored), then plain turns.
    orphan = LLMMessage(role="tool", content="42", tool_call_id="gone", name="add")
    greeting = LLMMessage(role="assistant", content="Hello, how can I help?")
    current = LLMMessage(role="user", content="thanks")
    state = RunState(transcript=[SYSTEM, orphan, greeting, *_plain_turn(1), current])
    assert await _prompt(state, 10_000) == [SYSTEM, greeting, *_plain_turn(1), current]
    # Past the byte bound, counted exactly: the same.
    exact = _tokens([SYSTEM, greeting, *_plain_turn(1), current])
    assert await _prompt(state, exact) == [SYSTEM, greeting, *_plain_turn(1), current]
    assert await _prompt(state, exact - 1) == [SYSTEM, *_plain_turn(1), current]


async def test_a_current_turn_too_long_for_the_budget_ends_the_run_with_token_limit_exceeded() -> None:
    current = [LLMMessage(role="user", content="go"), *_tool_turn(3)[1:]]
    state = RunState(transcript=[SYSTEM, *_plain_turn(1), *current])
    needed = _tokens([SYSTEM, *current])
    assert await _prompt(state, needed) == [SYSTEM, *current]
    failed = await _prompt(state, needed - 1)
    assert isinstance(failed, Failed) and failed.code is ErrorCode.TOKEN_LIMIT_EXCEEDED
    assert f"need {needed} prompt tokens" in failed.message
    # A profile whose answer takes the whole context leaves no room for any prompt.
    none_left = await ContextWindow(_profile(max_context_tokens=100, max_tokens=100)).prompt(state)
    assert isinstance(none_left, Failed) and none_left.code is ErrorCode.TOKEN_LIMIT_EXCEEDED


async def test_the_tool_definitions_count_against_the_budget() -> None:
    spec = ToolSpec("add", "Adds a and b. " * 20, {"type": "object", "properties": {"a": {"type": "number"}}})
    state = RunState(transcript=[SYSTEM, *_plain_turn(1), LLMMessage(role="user", content="hi")])
    budget = _tokens(state.transcript)
    assert await ContextWindow(_profile(_context_for(budget))).prompt(state) == state.transcript
    with_tools = await ContextWindow(_profile(_context_for(budget)), [spec]).prompt(state)
    assert with_tools == [SYSTEM, state.transcript[-1]]


async def test_each_message_is_counted_once_per_run_and_only_as_far_back_as_the_window_reaches(monkeypatch) -> None:
    counted: list[LLMMessage] = []

    def counting(message: LLMMessage) -> int:
        counted.append(message)
        return message_tokens(message)

    monkeypatch.setattr(context_window, "message_tokens", counting)
    turns = [_plain_turn(i) for i in range(200)]
    state = RunState(transcript=[SYSTEM, *(m for t in turns for m in t), LLMMessage(role="user", content="next")])
    window = ContextWindow(_profile(_context_for(1000)))
    first = await window.prompt(state)
    assert not isinstance(first, Failed)
    kept = len(first) - 2
    # The window's messages, the turn that did not fit, the system prompt and the new message.
    assert len(counted) == kept + 2 + 2 and kept < 20
    counted.clear()
    state.transcript += [LLMMessage(role="assistant", content="a step"), LLMMessage(role="tool", content="1", tool_call_id="x")]
    second = await window.prompt(state)
    assert not isinstance(second, Failed)
    # The next step counts only the messages it added (and the turns it reaches further back, none here).
    assert counted[:2] == state.transcript[-2:] and len(counted) <= 2 + 2


async def test_steps_of_a_run_leave_out_the_oldest_turns_as_a_fresh_window_would() -> None:
    turns = [m for i in range(12) for m in (_tool_turn(i) if i % 3 else _plain_turn(i))]
    state = RunState(transcript=[SYSTEM, *turns, LLMMessage(role="user", content="go on")], context=[MEMORY])
    window = ContextWindow(_profile(_context_for(900)))
    lengths = []
    for step in range(40):
        prompt = await window.prompt(state)
        assert prompt == await ContextWindow(_profile(_context_for(900))).prompt(state)
        if isinstance(prompt, Failed):
            break
        lengths.append(prompt.index(state.transcript[len(turns) + 1]))  # the earlier turns' messages kept
        state.transcript += _tool_turn(100 + step)[1:]  # a step: tool calls, their results, a text
    # The earlier turns left the window step by step until the current turn alone no longer fit.
    assert isinstance(prompt, Failed) and lengths == sorted(lengths, reverse=True) and len(set(lengths)) > 3


async def test_nothing_is_tokenized_while_the_byte_length_is_within_the_budget(monkeypatch) -> None:
    def refuse(message: LLMMessage) -> Any:
        raise AssertionError("tokenized a prompt whose bytes fit")

    monkeypatch.setattr(context_window, "message_tokens", refuse)
    state = RunState(transcript=[SYSTEM, *_plain_turn(1), LLMMessage(role="user", content="hi")])
    assert await _prompt(state, 2_000) == state.transcript


@pytest.mark.parametrize(
    "text",
    ["hello", "ünïcödé 漢字 😀😀 👩‍👩‍👧", " " * 300, "a" * 1000, "\x00\x01 zz\n\t", "the quick brown fox " * 50,
     "".join(chr(c) for c in range(0x20, 0x2FF))],
)
def test_the_byte_bound_is_never_under_the_exact_count(text: str) -> None:
    messages = [
        LLMMessage(role="user", content=text),
        LLMMessage(role="assistant", content=text[::-1], tool_calls=(ToolCall("c1", "add", {"text": text}),)),
        LLMMessage(role="tool", content=text, tool_call_id="c1", name="add"),
    ]
    for message in messages:
        assert message_tokens(message) <= message_bytes(message)
