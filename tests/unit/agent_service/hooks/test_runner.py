"""Hooks are called in order, and one that raises or takes too long is skipped, undone and counted."""

from __future__ import annotations

import asyncio
import logging

import pytest

from agent_service.hooks.base import BeforeModelCall, BeforeTool, Hook, HookPoint, RunInfo
from agent_service.hooks.runner import HookRunner
from agent_service.metrics import AgentMetrics
from shared.llm.base import CompletionOptions, LLMMessage

RUN = RunInfo(session_id="s1", run_id="r1", profile="default", user_id="u1", org_id="o1")


def _failures(metrics: AgentMetrics, hook: str, point: str, reason: str) -> float:
    value = metrics.registry.get_sample_value(
        "agent_hook_failures_total", {"hook": hook, "point": point, "reason": reason}
    )
    return value or 0.0


class AddsNote(Hook):
    async def before_model_call(self, data: BeforeModelCall) -> None:
        data.messages.append(LLMMessage(role="system", content="note"))


class BreaksAfterChanging(Hook):
    async def before_model_call(self, data: BeforeModelCall) -> None:
        data.messages.clear()
        data.options = CompletionOptions(model="other")
        raise RuntimeError("hook bug")


class Sleeps(Hook):
    async def before_tool(self, data: BeforeTool) -> None:
        data.refuse("half-way")
        await asyncio.sleep(30)


class Refuses(Hook):
    async def before_tool(self, data: BeforeTool) -> None:
        data.refuse("not today")


def _prompt() -> BeforeModelCall:
    return BeforeModelCall(RUN, 1, [LLMMessage(role="user", content="hi")], CompletionOptions(model="m"))


async def test_hooks_run_in_order_and_may_change_the_prompt() -> None:
    runner = HookRunner([AddsNote(), AddsNote()], timeout_s=1, metrics=AgentMetrics())
    data = _prompt()
    await runner.call(HookPoint.BEFORE_MODEL_CALL, data)
    assert [m.content for m in data.messages] == ["hi", "note", "note"]


async def test_a_hook_that_raises_is_skipped_with_its_changes_undone(caplog: pytest.LogCaptureFixture) -> None:
    metrics = AgentMetrics()
    runner = HookRunner([BreaksAfterChanging(), AddsNote()], timeout_s=1, metrics=metrics)
    data = _prompt()
    with caplog.at_level(logging.ERROR, logger="agent_service.hooks.runner"):
        await runner.call(HookPoint.BEFORE_MODEL_CALL, data)
    assert [m.content for m in data.messages] == ["hi", "note"], "the next hook still runs, on the original prompt"
    assert data.options.model == "m"
    assert _failures(metrics, "BreaksAfterChanging", "before_model_call", "error") == 1
    assert any(r.message == "hook failed and was skipped" for r in caplog.records)


async def test_a_hook_that_takes_too_long_is_cut_off_and_its_refusal_ignored() -> None:
    metrics = AgentMetrics()
    runner = HookRunner([Sleeps()], timeout_s=0.05, metrics=metrics)
    data = BeforeTool(RUN, "c1", "calculator", {"expression": "1+1"})
    await asyncio.wait_for(runner.call(HookPoint.BEFORE_TOOL, data), 5)
    assert data.refusal is None
    assert _failures(metrics, "Sleeps", "before_tool", "timeout") == 1


async def test_only_points_a_hook_overrides_are_called() -> None:
    runner = HookRunner([Refuses()], timeout_s=1, metrics=AgentMetrics())
    assert runner.wants(HookPoint.BEFORE_TOOL)
    assert not runner.wants(HookPoint.ANSWER_CHUNK) and not runner.wants(HookPoint.RUN_START)
    data = BeforeTool(RUN, "c1", "calculator", {})
    await runner.call(HookPoint.BEFORE_TOOL, data)
    assert data.refusal == "not today"
