"""A run whose replica stops renewing its lease (a crash, as the database sees it) is continued by another
replica from its last checkpoint: same run and session, RUN_RESUMED at the session's next seq, the step
that was cut done again, a completed tool call never made again, a call in flight made again only when
its tool says that is harmless. Two replicas in this process over one database (SQLite and PostgreSQL);
the crash is the owner's lease keeper closed while its run is held at the point under test."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
from sqlalchemy import select

from agent_service.models import AgentEvent
from agent_service.runs.continuation import UNKNOWN_OUTCOME
from agent_service.tools.base import Tool, ToolContext
from agent_service.tools.registry import ToolRegistry
from shared.llm.base import LLMDone, LLMEvent, LLMMessage, TextDelta, ToolCall, ToolSpec
from tests.integration.agent_service.replicas.support import (
    REPLICA_SETTINGS,
    SEQ_BLOCK,
    keeper,
    log_events,
    manager,
    run_row,
    wait_for_status,
)
from tests.support.models import ScriptedModelBase
from tests.support.run_text import run_text, run_text_by_seq

PRE = "Let me look that up. "
WORDS = [f"word{i} " for i in range(12)]
ANSWER = PRE + "".join(WORDS)
PROFILES = """
profiles:
  - name: default
    description: test
    system_prompt: You use the probe.
    tools: [probe]
    max_steps: 5
    max_tokens: 256
"""


class StepModel(ScriptedModelBase):
    """Says ``PRE`` and calls the probe; once it has the probe's result, streams ``WORDS``. With
    ``hold_after``, it stops after that many words until ``gate`` opens (``held`` set)."""

    def __init__(self, hold_after: int | None = None) -> None:
        self.hold_after = hold_after
        self.held = asyncio.Event()
        self.gate = asyncio.Event()
        self.prompts: list[list[LLMMessage]] = []

    async def reply(self, messages: Sequence[LLMMessage], tools: Sequence[ToolSpec]) -> AsyncIterator[LLMEvent]:
        self.prompts.append(list(messages))
        if messages[-1].role != "tool":
            yield TextDelta(PRE)
            yield ToolCall(id="call-probe", name="probe", arguments={"q": "x"})
            yield LLMDone(prompt_tokens=3, completion_tokens=3, finish_reason="tool_calls")
            return
        for index, word in enumerate(WORDS):
            if index == self.hold_after:
                self.held.set()
                await self.gate.wait()
            yield TextDelta(word)
        yield LLMDone(prompt_tokens=3, completion_tokens=len(WORDS), finish_reason="stop")


class Probe(Tool):
    """Counts its calls; the first waits for ``gate`` (when given), having set ``started``. It also
    records whether its TOOL_START was in the log when it ran (``logged_at_start``)."""

    name: ClassVar[str] = "probe"
    description: ClassVar[str] = "a probe"
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {"q": {"type": "string"}}}

    def __init__(self, *, idempotent: bool, db=None, gate: asyncio.Event | None = None) -> None:
        self.idempotent = idempotent  # type: ignore[misc]
        self.db = db
        self.gate = gate
        self.started = asyncio.Event()
        self.calls = 0
        self.logged_at_start: list[bool] = []

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        self.calls += 1
        if self.db is not None:
            async with self.db.sessionmaker() as s:
                logged = await s.scalar(select(AgentEvent.seq).where(
                    AgentEvent.session_id == ctx.session_id, AgentEvent.type == "TOOL_START"))
            self.logged_at_start.append(logged is not None)
        self.started.set()
        if self.gate is not None and self.calls == 1:
            await self.gate.wait()
        return {"value": 42}


@pytest.fixture
def profiles(tmp_path: Path) -> Path:
    path = tmp_path / "profiles.yaml"
    path.write_text(PROFILES)
    return path


def _settings(profiles: Path) -> dict[str, Any]:
    return {**REPLICA_SETTINGS, "profiles_file": profiles}


async def _crash(agent) -> None:
    """As far as the database can tell, ``agent`` died: its leases are no longer renewed."""
    await keeper(agent).aclose()


async def test_a_cut_answer_is_asked_again_from_the_last_step_and_the_completed_call_is_not_made_again(
    agent_factory, db, profiles,
) -> None:
    probe = Probe(idempotent=False)
    held = StepModel(hold_after=3)
    async with agent_factory(provider=held, tools=ToolRegistry([probe]), **_settings(profiles)) as a, \
            agent_factory(provider=StepModel(), tools=ToolRegistry([probe]), **_settings(profiles)) as b:
        first = await a.execute("go", stop_after=1)
        session_id, run_id = first.events[0].session_id, first.events[0].run_id
        await held.held.wait()
        await _crash(a)

        await wait_for_status(b, session_id, "COMPLETED")
        log = await b.replay(session_id, 0)
        types = [e.type.value for e in log.events]
        assert types.count("RUN_RESUMED") == 1 and types[-1] == "COMPLETE", types
        resumed = log.of_type("RUN_RESUMED")[0]
        tool_end = log.of_type("TOOL_END")[0]
        # It picks up after the tool's result (the last step that ended), above A's reservation.
        assert resumed.seq == SEQ_BLOCK + 1 and resumed.run_id == run_id
        assert resumed.data == {"checkpoint_seq": tool_end.seq, "answer_chars": len(PRE), "continuation": 1, "step": 1}
        # The completed call is not made again; the model is asked again with its result.
        assert probe.calls == 1 and len(log.of_type("TOOL_START")) == 1
        assert [m.role for m in b.app.state.agent.run_manager._engine.provider.prompts[-1]][-2:] == ["assistant", "tool"]
        # Whoever reads the log, by either rule of the contract, shows the answer once.
        assert log.last.data["answer"] == ANSWER
        assert run_text(log.events, run_id) == run_text_by_seq(log.events, run_id) == ANSWER
        row = await run_row(db, run_id)
        assert row.status == "COMPLETED" and row.continuations == 1 and row.owner_id == manager(b).owner_id

        # A wakes up: its model's words and end are not its to write any more.
        held.gate.set()
        keeper(a).start()
        await asyncio.wait_for(asyncio.shield(manager(a).get(session_id).task), timeout=10)
        assert [(e.seq, e.type) for e in await log_events(db, session_id)] == [(e.seq, e.type.value) for e in log.events]


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "not_idempotent"])
async def test_a_call_in_flight_is_made_again_only_when_its_tool_says_that_is_harmless(
    agent_factory, db, profiles, idempotent: bool,
) -> None:
    gate = asyncio.Event()
    probe = Probe(idempotent=idempotent, db=db, gate=gate)
    model_b = StepModel()
    async with agent_factory(provider=StepModel(), tools=ToolRegistry([probe]), **_settings(profiles)) as a, \
            agent_factory(provider=model_b, tools=ToolRegistry([probe]), **_settings(profiles)) as b:
        first = await a.execute("go", stop_after=1)
        session_id, run_id = first.events[0].session_id, first.events[0].run_id
        await probe.started.wait()
        await _crash(a)

        await wait_for_status(b, session_id, "COMPLETED")
        log = await b.replay(session_id, 0)
        starts, ends = log.of_type("TOOL_START"), log.of_type("TOOL_END")
        resumed = log.of_type("RUN_RESUMED")[0]
        # The checkpoint is the model turn that called the probe: its TOOL_START came after it.
        assert resumed.data["checkpoint_seq"] == starts[0].seq - 1 and resumed.data["answer_chars"] == len(PRE)
        if idempotent:
            assert probe.calls == 2
            assert [e.seq > resumed.seq for e in starts] == [False, True]
            assert len(ends) == 1 and ends[0].data["ok"] is True
        else:
            # Its TOOL_START was durable before it ran; it is not made again, and the model and the
            # user's tool card are told that its outcome is unknown.
            assert probe.calls == 1 and probe.logged_at_start == [True]
            assert len(starts) == 1 and len(ends) == 1 and ends[0].seq == resumed.seq + 1
            assert ends[0].data["ok"] is False and ends[0].data["error"] == UNKNOWN_OUTCOME
            told = model_b.prompts[-1][-1]
            assert told.role == "tool" and told.tool_call_id == "call-probe" and UNKNOWN_OUTCOME in told.content
        assert log.last.type.value == "COMPLETE" and log.last.data["answer"] == ANSWER
        assert run_text(log.events, run_id) == ANSWER
        gate.set()
        keeper(a).start()


class UserProbe(Probe):
    """An idempotent probe recording the user each call acts for; its first call for a user with the
    permission ``hold`` waits for ``gate``."""

    def __init__(self, gate: asyncio.Event) -> None:
        super().__init__(idempotent=True)
        self.gate_for_hold = gate
        self.held = asyncio.Event()
        self.users: list[dict[str, Any]] = []

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        self.users.append(ctx.user_context.model_dump())
        self.started.set()
        if "hold" in ctx.user_context.permissions and len([u for u in self.users if "hold" in u["permissions"]]) == 1:
            self.held.set()
            await self.gate_for_hold.wait()
        return {"value": 42}


async def test_a_continued_run_acts_for_the_user_its_message_came_from(agent_factory, profiles) -> None:
    """A session's second message said other permissions than its first: the run continued after a crash
    still acts with the second message's, not with what the session's row recorded at its start."""
    gate = asyncio.Event()
    probe = UserProbe(gate)
    first_user = {"user_id": "u-1", "org_id": "o-1", "permissions": ["read"]}
    second_user = {**first_user, "permissions": ["read", "hold"]}
    async with agent_factory(provider=StepModel(), tools=ToolRegistry([probe]), **_settings(profiles)) as a, \
            agent_factory(provider=StepModel(), tools=ToolRegistry([probe]), **_settings(profiles)) as b:
        first = await a.execute("go", body={"user_context": first_user})
        session_id = first.last.session_id
        assert first.last.type.value == "COMPLETE"
        second = asyncio.create_task(a.execute("again", body={"session_id": session_id, "user_context": second_user}))
        await asyncio.wait_for(probe.held.wait(), 10)
        await _crash(a)
        await wait_for_status(b, session_id, "COMPLETED")
        assert [u["permissions"] for u in probe.users] == [["read"], ["read", "hold"], ["read", "hold"]]
        gate.set()
        keeper(a).start()
        await second

