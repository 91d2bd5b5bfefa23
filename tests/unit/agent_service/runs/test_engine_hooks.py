"""The engine calls the lifecycle hooks at each point of the loop, with what they may change taking effect."""

from __future__ import annotations

import asyncio

from agent_service.hooks.base import (
    AfterModelCall,
    AfterTool,
    AnswerChunk,
    BeforeModelCall,
    BeforeTool,
    Hook,
    RunEnd,
    RunStart,
)
from agent_service.hooks.runner import HookRunner
from agent_service.metrics import AgentMetrics
from agent_service.runs.engine import ReActEngine
from agent_service.runs.state import Completed, RunContext, RunState
from shared.llm.base import LLMDone, LLMMessage, TextDelta, ToolCall
from shared.protocol import EventType, UserContext
from tests.unit.agent_service.runs.test_engine import AddTool, Recorder, ScriptedProvider, Tools, _profile

CTX = RunContext(session_id="s1", run_id="r1", profile=_profile(), user_context=UserContext(user_id="u1", org_id="o1"))


def _state() -> RunState:
    return RunState(transcript=[LLMMessage(role="system", content="sys"), LLMMessage(role="user", content="add 2 and 3")])


def _tool_then_answer() -> ScriptedProvider:
    return ScriptedProvider([
        [ToolCall("c1", "add", {"a": 2, "b": 3}), LLMDone(5, 1)],
        [TextDelta("It is "), TextDelta("5."), LLMDone(9, 2)],
    ])


class Journal(Hook):
    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    async def run_start(self, data: RunStart) -> None:
        self.calls.append(("run_start", data.message))

    async def before_model_call(self, data: BeforeModelCall) -> None:
        self.calls.append(("before_model_call", data.step))

    async def after_model_call(self, data: AfterModelCall) -> None:
        self.calls.append(("after_model_call", [c.name for c in data.tool_calls] or data.text))

    async def before_tool(self, data: BeforeTool) -> None:
        self.calls.append(("before_tool", (data.tool, data.arguments)))

    async def after_tool(self, data: AfterTool) -> None:
        self.calls.append(("after_tool", (data.ok, data.result)))

    async def answer_chunk(self, data: AnswerChunk) -> None:
        self.calls.append(("answer_chunk", data.text))

    async def run_end(self, data: RunEnd) -> None:
        self.calls.append(("run_end", (data.outcome, data.usage.llm_calls, data.run.org_id)))


def _engine(provider: ScriptedProvider, *hooks: Hook, timeout_s: float = 1.0, metrics: AgentMetrics | None = None):
    metrics = metrics or AgentMetrics()
    runner = HookRunner(hooks, timeout_s=timeout_s, metrics=metrics)
    return ReActEngine(provider, Tools(AddTool()), metrics, ask_user_timeout_s=300, hooks=runner)


async def test_every_point_is_called_in_the_loop_order() -> None:
    journal = Journal()
    outcome = await _engine(_tool_then_answer(), journal).run(CTX, _state(), Recorder())
    assert isinstance(outcome, Completed)
    assert journal.calls == [
        ("run_start", "add 2 and 3"),
        ("before_model_call", 1),
        ("after_model_call", ["add"]),
        ("before_tool", ("add", {"a": 2, "b": 3})),
        ("after_tool", (True, {"result": 5})),
        ("before_model_call", 2),
        ("answer_chunk", "It is "),
        ("answer_chunk", "5."),
        ("after_model_call", "It is 5."),
        ("run_end", ("COMPLETE", 2, "o1")),
    ]


class AddsContext(Hook):
    async def before_model_call(self, data: BeforeModelCall) -> None:
        data.messages.insert(1, LLMMessage(role="system", content="the user prefers short answers"))


async def test_before_model_call_changes_the_prompt_of_that_call_only() -> None:
    provider = ScriptedProvider([[TextDelta("ok"), LLMDone(3, 1)]])
    state = _state()
    await _engine(provider, AddsContext()).run(CTX, state, Recorder())
    sent = [m.content for m in provider.calls[0][0]]
    assert sent == ["sys", "the user prefers short answers", "add 2 and 3"]
    assert [m.content for m in state.transcript] == ["sys", "add 2 and 3", "ok"], "the transcript is left as it is"


class RefusesAdd(Hook):
    async def before_tool(self, data: BeforeTool) -> None:
        if data.tool == "add":
            data.refuse("add is not allowed here")


async def test_before_tool_may_refuse_a_call_with_a_reason() -> None:
    provider = _tool_then_answer()
    rec = Recorder()
    outcome = await _engine(provider, RefusesAdd()).run(CTX, _state(), rec)
    assert isinstance(outcome, Completed)
    end = next(data for type_, data in rec.events if type_ is EventType.TOOL_END)
    assert end["ok"] is False and end["error"] == "add is not allowed here"
    tool_message = provider.calls[1][0][-1]
    assert tool_message.role == "tool" and "add is not allowed here" in tool_message.content


class Broken(Hook):
    async def run_start(self, data: RunStart) -> None:
        raise RuntimeError("bug")

    async def before_tool(self, data: BeforeTool) -> None:
        data.refuse("half-way")
        raise RuntimeError("bug")

    async def answer_chunk(self, data: AnswerChunk) -> None:
        await asyncio.sleep(30)


async def test_a_failing_or_slow_hook_never_breaks_the_run() -> None:
    metrics = AgentMetrics()
    rec = Recorder()
    outcome = await asyncio.wait_for(
        _engine(_tool_then_answer(), Broken(), timeout_s=0.05, metrics=metrics).run(CTX, _state(), rec), 10
    )
    assert isinstance(outcome, Completed) and outcome.answer == "It is 5."
    end = next(data for type_, data in rec.events if type_ is EventType.TOOL_END)
    assert end["ok"] is True, "the refusal of a hook that then failed is undone"

    def failures(point: str, reason: str) -> float:
        labels = {"hook": "Broken", "point": point, "reason": reason}
        return metrics.registry.get_sample_value("agent_hook_failures_total", labels) or 0.0

    assert failures("run_start", "error") == 1 and failures("before_tool", "error") == 1
    assert failures("answer_chunk", "timeout") == 2


class Hangs:
    """A model that never answers: the run is cancelled while it waits."""

    name = "hangs"

    async def stream(self, messages, *, tools=(), options=None):
        await asyncio.Event().wait()
        yield TextDelta("never")

    async def aclose(self) -> None:
        return None


class EndWatcher(Hook):
    def __init__(self) -> None:
        self.calling_model = asyncio.Event()
        self.ends: list[RunEnd] = []

    async def before_model_call(self, data: BeforeModelCall) -> None:
        self.calling_model.set()

    async def run_end(self, data: RunEnd) -> None:
        self.ends.append(data)


async def test_run_end_is_called_for_a_cancelled_run() -> None:
    watcher = EndWatcher()
    metrics = AgentMetrics()
    engine = ReActEngine(Hangs(), Tools(AddTool()), metrics, ask_user_timeout_s=300,
                         hooks=HookRunner([watcher], timeout_s=1, metrics=metrics))
    task = asyncio.create_task(engine.run(CTX, _state(), Recorder()))
    await asyncio.wait_for(watcher.calling_model.wait(), 5)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    [end] = watcher.ends
    assert (end.outcome, end.error_code) == ("ERROR", "CANCELLED")
