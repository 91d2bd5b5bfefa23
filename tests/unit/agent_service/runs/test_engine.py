"""The ReAct loop against a scripted model and small tools: every way a run can end."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, ClassVar

import pytest

from agent_service.metrics import AgentMetrics
from agent_service.profiles.schemas import Profile
from agent_service.runs.engine import ReActEngine
from agent_service.runs.state import (
    Completed,
    Failed,
    Paused,
    Resume,
    RunContext,
    RunState,
    close_pending_calls,
)
from agent_service.tools.base import InputRequired, Tool, ToolContext, ToolError, ToolOutput, UserReply
from shared.llm.base import (
    CompletionOptions,
    LLMConnectionError,
    LLMDone,
    LLMEvent,
    LLMMessage,
    LLMStatusError,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolSpec,
)
from shared.protocol import ArtifactData, AskUserKind, ErrorCode, EventType, UserContext
from shared.tokens import count_messages_tokens


class ScriptedProvider:
    """Plays one scripted turn per call and records what the engine sent."""

    name = "scripted"

    def __init__(self, turns: list[list[LLMEvent] | Exception]) -> None:
        self.turns = list(turns)
        self.calls: list[tuple[list[LLMMessage], list[str]]] = []

    async def stream(
        self, messages: Sequence[LLMMessage], *, tools: Sequence[ToolSpec] = (),
        options: CompletionOptions = CompletionOptions(),  # noqa: B008 - the interface's own default
    ) -> AsyncIterator[LLMEvent]:
        self.calls.append((list(messages), [t.name for t in tools]))
        turn = self.turns.pop(0)
        if isinstance(turn, Exception):
            raise turn
        for event in turn:
            yield event

    async def aclose(self) -> None:
        return None


class AddTool(Tool):
    name = "add"
    description = "Adds a and b."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        if not isinstance(args.get("a"), (int, float)) or not isinstance(args.get("b"), (int, float)):
            raise ToolError("a and b must be numbers")
        return {"result": args["a"] + args["b"]}


class Tools:
    def __init__(self, *tools: Tool) -> None:
        self._tools = {t.name: t for t in tools}

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[EventType, dict]] = []

    def __call__(self, type_: EventType, data) -> None:
        self.events.append((type_, data.model_dump(mode="json")))

    def types(self) -> list[EventType]:
        return [t for t, _ in self.events]


def _profile(**overrides) -> Profile:
    values: dict[str, Any] = {"name": "p", "system_prompt": "sys", "tools": ["add", "ask_user"], "max_steps": 4}
    values.update(overrides)
    return Profile(**values)


def _ctx(profile: Profile) -> RunContext:
    return RunContext(session_id="s1", run_id="r1", profile=profile, user_context=UserContext(user_id="u1"))


def _state() -> RunState:
    return RunState(transcript=[LLMMessage(role="system", content="sys"), LLMMessage(role="user", content="hi")])


def _engine(provider) -> ReActEngine:
    return ReActEngine(provider, Tools(AddTool()), AgentMetrics(), ask_user_timeout_s=300)


async def test_text_answer_streams_chunks_and_completes() -> None:
    provider = ScriptedProvider([[TextDelta("Hello "), TextDelta("there."), LLMDone(10, 3)]])
    rec = Recorder()
    outcome = await _engine(provider).run(_ctx(_profile()), _state(), rec)
    assert isinstance(outcome, Completed)
    assert outcome.answer == "Hello there."
    # Coalescing off (the engine's default; the service turns it on): one chunk per delta.
    assert rec.types() == [EventType.ANSWER_CHUNK, EventType.ANSWER_CHUNK]
    assert outcome.usage.prompt_tokens == 10 and outcome.usage.completion_tokens == 3
    assert outcome.usage.total_tokens == 13 and outcome.usage.llm_calls == 1
    assert provider.calls[0][1] == ["add"]  # only tools the lookup knows are offered


async def test_with_coalescing_deltas_that_came_together_are_one_chunk_and_the_first_is_alone() -> None:
    provider = ScriptedProvider([
        [ReasoningDelta("I should "), ReasoningDelta("add "), ReasoningDelta("first."), TextDelta("Let"),
         TextDelta(" me"), TextDelta(" add."), ToolCall("c1", "add", {"a": 2, "b": 3}), LLMDone()],
        [TextDelta("The"), TextDelta(" sum"), TextDelta(" is"), TextDelta(" 5."), LLMDone()],
    ])
    rec = Recorder()
    # A budget no test waits out: what sends the held text is the tool call, or the end of the reply.
    engine = ReActEngine(provider, Tools(AddTool()), AgentMetrics(), ask_user_timeout_s=300,
                         stream_coalesce_ms=60_000)
    outcome = await engine.run(_ctx(_profile()), _state(), rec)
    assert isinstance(outcome, Completed) and outcome.answer == "Let me add.The sum is 5."
    assert [(t, d.get("text")) for t, d in rec.events] == [
        (EventType.THOUGHT, "I should add first."),  # one thought, as without coalescing
        (EventType.ANSWER_CHUNK, "Let"),  # each model call's first token at once
        (EventType.ANSWER_CHUNK, " me add."),  # sent before the tool call
        (EventType.TOOL_START, None), (EventType.TOOL_END, None),
        (EventType.ANSWER_CHUNK, "The"),
        (EventType.ANSWER_CHUNK, " sum is 5."),  # sent at the end of the reply
    ]


async def test_tool_call_result_goes_back_to_the_model() -> None:
    provider = ScriptedProvider([
        [ReasoningDelta("I should "), ReasoningDelta("add."), ToolCall("c1", "add", {"a": 2, "b": 3}), LLMDone()],
        [TextDelta("The sum is 5."), LLMDone()],
    ])
    rec = Recorder()
    state = _state()
    outcome = await _engine(provider).run(_ctx(_profile()), state, rec)
    assert isinstance(outcome, Completed) and outcome.answer == "The sum is 5."
    assert rec.types() == [EventType.THOUGHT, EventType.TOOL_START, EventType.TOOL_END, EventType.ANSWER_CHUNK]
    assert rec.events[0][1]["text"] == "I should add."
    end = rec.events[2][1]
    assert end["ok"] is True and end["result"] == {"result": 5} and end["duration_ms"] >= 0
    second_prompt = provider.calls[1][0]
    assert second_prompt[-1].role == "tool" and second_prompt[-1].tool_call_id == "c1"
    assert '"result":5' in second_prompt[-1].content
    assert outcome.usage.tool_calls == 1 and outcome.usage.llm_calls == 2
    # Without provider counts the engine counts tokens itself.
    assert outcome.usage.prompt_tokens > 0 and outcome.usage.completion_tokens > 0


async def test_tool_error_and_unknown_tool_are_reported_to_the_model() -> None:
    provider = ScriptedProvider([
        [ToolCall("c1", "add", {"a": "x"}), ToolCall("c2", "delete_everything", {}), LLMDone()],
        [TextDelta("Sorry."), LLMDone()],
    ])
    rec = Recorder()
    outcome = await _engine(provider).run(_ctx(_profile()), _state(), rec)
    assert isinstance(outcome, Completed)
    ends = [data for t, data in rec.events if t is EventType.TOOL_END]
    assert [e["ok"] for e in ends] == [False, False]
    assert "numbers" in ends[0]["error"] and "unknown tool" in ends[1]["error"]


async def test_max_steps_fails_the_run() -> None:
    provider = ScriptedProvider([[ToolCall(f"c{i}", "add", {"a": 1, "b": 1}), LLMDone()] for i in range(2)])
    outcome = await _engine(provider).run(_ctx(_profile(max_steps=2)), _state(), Recorder())
    assert isinstance(outcome, Failed) and outcome.code is ErrorCode.MAX_STEPS_EXCEEDED


@pytest.mark.parametrize(
    ("error", "code"),
    [(LLMConnectionError("down"), ErrorCode.LLM_UNAVAILABLE), (LLMStatusError(400, "bad"), ErrorCode.LLM_ERROR)],
)
async def test_llm_errors_map_to_codes(error: Exception, code: ErrorCode) -> None:
    outcome = await _engine(ScriptedProvider([error])).run(_ctx(_profile()), _state(), Recorder())
    assert isinstance(outcome, Failed) and outcome.code is code


async def test_token_limit() -> None:
    outcome = await _engine(ScriptedProvider([])).run(
        _ctx(_profile(max_context_tokens=5)), _state(), Recorder()
    )
    assert isinstance(outcome, Failed) and outcome.code is ErrorCode.TOKEN_LIMIT_EXCEEDED


async def test_a_transcript_over_the_context_completes_on_a_window_of_it() -> None:
    # Twenty earlier turns of ~100 tokens each: the whole transcript is far over the context.
    history = [LLMMessage(role="system", content="sys")]
    for i in range(20):
        history += [LLMMessage(role="user", content=f"question {i} " * 50), LLMMessage(role="assistant", content=f"answer {i}")]
    state = RunState(transcript=[*history, LLMMessage(role="user", content="and now?")])
    provider = ScriptedProvider([[ToolCall("c1", "add", {"a": 1, "b": 2}), LLMDone()], [TextDelta("3"), LLMDone(10, 1)]])
    profile = _profile(max_context_tokens=600, max_tokens=100)
    assert count_messages_tokens([(m.role, m.content) for m in state.transcript]) > 4 * 600
    outcome = await _engine(provider).run(_ctx(profile), state, Recorder())
    assert isinstance(outcome, Completed) and outcome.answer == "3"
    for prompt, _ in provider.calls:
        assert prompt[0].content == "sys" and count_messages_tokens([(m.role, m.content) for m in prompt]) <= 600 - 100
    # The second call carries the current turn whole: the question, the tool call and its result.
    assert [m.role for m in provider.calls[1][0][-3:]] == ["user", "assistant", "tool"]
    # The stored transcript keeps everything.
    assert state.transcript[: len(history)] == history and len(state.transcript) == len(history) + 4


async def test_ask_user_pauses_and_resumes_from_json_state() -> None:
    provider = ScriptedProvider([
        [ToolCall("q1", "ask_user", {"question": "Where to?"}), ToolCall("c2", "add", {"a": 1, "b": 2}), LLMDone()],
        [TextDelta("Off to Lisbon."), LLMDone()],
    ])
    engine = _engine(provider)
    state = _state()
    rec = Recorder()
    paused = await engine.run(_ctx(_profile()), state, rec)
    assert isinstance(paused, Paused)
    assert paused.question.question == "Where to?" and paused.question.kind is AskUserKind.QUESTION
    assert paused.call_id == "q1" and rec.events == []

    # The state survives a round trip through JSON (the database), as after a restart.
    saved = ([m.to_dict() for m in state.transcript], state.to_json())
    restored = RunState.from_json(*saved)
    rec2 = Recorder()
    outcome = await engine.run(_ctx(_profile()), restored, rec2, Resume(AskUserKind.QUESTION, "Lisbon", False))
    assert isinstance(outcome, Completed) and outcome.answer == "Off to Lisbon."
    # The remaining call of the same turn ran after the answer.
    assert rec2.types()[:2] == [EventType.TOOL_START, EventType.TOOL_END]
    prompt = provider.calls[1][0]
    tool_messages = [m for m in prompt if m.role == "tool"]
    assert [m.tool_call_id for m in tool_messages] == ["q1", "c2"]
    assert "Lisbon" in tool_messages[0].content


async def test_ask_user_is_not_intercepted_when_the_profile_does_not_allow_it() -> None:
    provider = ScriptedProvider([
        [ToolCall("q1", "ask_user", {"question": "?"}), LLMDone()],
        [TextDelta("ok"), LLMDone()],
    ])
    rec = Recorder()
    outcome = await _engine(provider).run(_ctx(_profile(tools=["add"])), _state(), rec)
    assert isinstance(outcome, Completed)
    assert [d["ok"] for t, d in rec.events if t is EventType.TOOL_END] == [False]


@pytest.mark.parametrize("approved", [True, False])
async def test_approval_required_tool(approved: bool) -> None:
    provider = ScriptedProvider([
        [ToolCall("c1", "add", {"a": 4, "b": 5}), LLMDone()],
        [TextDelta("done"), LLMDone()],
    ])
    engine = _engine(provider)
    profile = _profile(approval_required_tools=["add"])
    state = _state()
    paused = await engine.run(_ctx(profile), state, Recorder())
    assert isinstance(paused, Paused)
    assert paused.question.kind is AskUserKind.APPROVAL
    assert paused.question.tool == "add" and paused.question.args == {"a": 4, "b": 5}

    rec = Recorder()
    outcome = await engine.run(_ctx(profile), state, rec, Resume(AskUserKind.APPROVAL, "", approved))
    assert isinstance(outcome, Completed)
    tool_message = next(m for m in provider.calls[1][0] if m.role == "tool")
    if approved:
        assert rec.types()[:2] == [EventType.TOOL_START, EventType.TOOL_END]
        assert '"result":9' in tool_message.content
    else:
        assert EventType.TOOL_START not in rec.types()
        assert "refused" in tool_message.content


def test_close_pending_calls_keeps_the_transcript_valid() -> None:
    state = _state()
    state.transcript.append(LLMMessage(role="assistant", tool_calls=(ToolCall("q1", "ask_user", {}),)))
    state.pending_calls = [ToolCall("q1", "ask_user", {})]
    close_pending_calls(state, "cancelled")
    assert state.pending_calls == []
    assert state.transcript[-1].role == "tool" and state.transcript[-1].tool_call_id == "q1"


class FileTool(Tool):
    """Hands the user a text file and returns a receipt, as ``create_file`` does."""

    name = "make_file"
    description = "Makes a file."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        artifact = ArtifactData(artifact_id="a1", name="out.txt", media_type="text/plain", text="tck")
        return ToolOutput({"artifact_id": "a1", "size": 3}, (artifact,))


async def test_an_artifact_a_tool_made_is_emitted_between_its_start_and_end_and_the_model_reads_the_receipt() -> None:
    provider = ScriptedProvider([[ToolCall("c1", "make_file", {}), LLMDone()], [TextDelta("Done."), LLMDone()]])
    rec = Recorder()
    engine = ReActEngine(provider, Tools(FileTool()), AgentMetrics(), ask_user_timeout_s=300)

    outcome = await engine.run(_ctx(_profile(tools=["make_file"])), _state(), rec)

    assert isinstance(outcome, Completed) and outcome.answer == "Done." and not outcome.direct
    assert rec.types() == [EventType.TOOL_START, EventType.ARTIFACT, EventType.TOOL_END, EventType.ANSWER_CHUNK]
    artifact, end = rec.events[1][1], rec.events[2][1]
    assert artifact == {"artifact_id": "a1", "name": "out.txt", "media_type": "text/plain", "text": "tck",
                        "call_id": "c1"}
    assert end["result"] == {"artifact_id": "a1", "size": 3}
    assert provider.calls[1][0][-1].content == '{"artifact_id":"a1","size":3}'


async def test_a_reply_is_the_answer_and_ends_the_run_as_a_direct_one() -> None:
    provider = ScriptedProvider([[
        ReasoningDelta("A greeting."), ToolCall("r1", "reply", {"text": "Hello!"}), ToolCall("c2", "add", {"a": 1, "b": 2}),
        LLMDone(),
    ]])
    rec = Recorder()
    state = _state()

    outcome = await _engine(provider).run(_ctx(_profile(tools=["add", "reply"])), state, rec)

    assert isinstance(outcome, Completed) and outcome.direct and outcome.answer == "Hello!"
    assert rec.types() == [EventType.THOUGHT, EventType.ANSWER_CHUNK]  # the add after the reply did not run
    assert rec.events[1][1] == {"text": "Hello!"}
    # Every call has its result: the session's next run starts from a valid transcript.
    results = {m.tool_call_id: m.content for m in state.transcript if m.role == "tool"}
    assert results == {"r1": '{"sent":true}', "c2": '{"error":"not run: the reply ended the turn"}'}
    assert state.pending_calls == [] and outcome.usage.tool_calls == 0


async def test_a_malformed_reply_goes_back_to_the_model_and_a_profile_without_reply_does_not_end_on_one() -> None:
    provider = ScriptedProvider([[ToolCall("r1", "reply", {}), LLMDone()], [TextDelta("Hi."), LLMDone()]])
    outcome = await _engine(provider).run(_ctx(_profile(tools=["reply"])), _state(), Recorder())
    assert isinstance(outcome, Completed) and not outcome.direct and outcome.answer == "Hi."
    assert "'text'" in provider.calls[1][0][-1].content

    provider = ScriptedProvider([[ToolCall("r1", "reply", {"text": "Hello!"}), LLMDone()], [TextDelta("Hi."), LLMDone()]])
    rec = Recorder()
    outcome = await _engine(provider).run(_ctx(_profile(tools=["add"])), _state(), rec)
    assert isinstance(outcome, Completed) and not outcome.direct
    assert "unknown tool 'reply'" in next(d for t, d in rec.events if t is EventType.TOOL_END)["error"]


class AskingTool(Tool):
    """Asks the user for a colour mid-call (``InputRequired``), twice when the first answer is no colour."""

    name = "paint"
    description = "Paints."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    timeout_s = 5.0

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        raise InputRequired("Which colour?", {"asked": 1})

    async def resume(self, args: dict[str, Any], state: dict[str, Any], reply: UserReply, ctx: ToolContext) -> Any:
        if reply.declined:
            raise ToolError("the user would not say")
        if reply.text not in ("red", "blue"):
            raise InputRequired("Red or blue?", {"asked": state["asked"] + 1})
        return {"painted": reply.text, "asked": state["asked"]}


async def test_a_tool_that_asks_mid_call_pauses_the_run_and_goes_on_with_the_answer() -> None:
    paint = ToolCall(id="c1", name="paint", arguments={})
    provider = ScriptedProvider([[paint, LLMDone(5, 1)], [TextDelta("Painted."), LLMDone(5, 1)]])
    engine = ReActEngine(provider, Tools(AskingTool()), AgentMetrics(), ask_user_timeout_s=300)
    ctx, state, rec = _ctx(_profile(tools=["paint"])), _state(), Recorder()

    first = await engine.run(ctx, state, rec)
    assert isinstance(first, Paused) and first.question.question == "Which colour?"
    assert first.question.kind is AskUserKind.QUESTION and first.question.tool == "paint"
    assert rec.types() == [EventType.TOOL_START], "no end: the call is still under way"
    saved = RunState.from_json(state.transcript_json(), state.to_json())  # as a paused run is stored
    assert saved.tool_input == {"call_id": "c1", "state": {"asked": 1}} and saved.pending_calls[0].id == "c1"

    again = await engine.run(ctx, saved, rec, Resume(AskUserKind.QUESTION, "green", approved=False))
    assert isinstance(again, Paused) and again.question.question == "Red or blue?"
    done = await engine.run(ctx, saved, rec, Resume(AskUserKind.QUESTION, "blue", approved=False))
    assert isinstance(done, Completed) and done.answer == "Painted."
    end = [data for type_, data in rec.events if type_ is EventType.TOOL_END]
    assert end == [{"call_id": "c1", "tool": "paint", "ok": True, "result": {"painted": "blue", "asked": 2},
                    "error": None, "duration_ms": end[0]["duration_ms"]}]
    assert saved.tool_input is None and saved.usage.tool_calls == 1


async def test_a_declined_question_is_the_tools_answer() -> None:
    provider = ScriptedProvider([[ToolCall(id="c1", name="paint", arguments={}), LLMDone(5, 1)],
                                 [TextDelta("No paint."), LLMDone(5, 1)]])
    engine = ReActEngine(provider, Tools(AskingTool()), AgentMetrics(), ask_user_timeout_s=300)
    ctx, state, rec = _ctx(_profile(tools=["paint"])), _state(), Recorder()
    assert isinstance(await engine.run(ctx, state, rec), Paused)
    done = await engine.run(ctx, state, rec, Resume(AskUserKind.QUESTION, "", approved=False, declined=True))
    assert isinstance(done, Completed)
    [(_, end)] = [(t, d) for t, d in rec.events if t is EventType.TOOL_END]
    assert end["ok"] is False and end["error"] == "the user would not say"
