"""A new message's model call starts while the run's claim is still being written, and the run
writes nothing until that claim has committed; a claim that fails leaves no trace of the run.

The claim is held up by a transaction of the test's own on the same database: an uncommitted run
row (of another session) carrying the execute's Idempotency-Key. On PostgreSQL the service's insert
of that key waits for it; on SQLite its first write waits for the write lock.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence

from sqlalchemy import select

from agent_service.models import AgentEvent, AgentRun, AgentSession
from shared.llm.base import CompletionOptions, LLMEvent, LLMMessage, ToolSpec
from shared.llm.builtin import BuiltinProvider
from shared.protocol import SessionStatus, utcnow

KEY = "early-key-1"


class ObservedModel(BuiltinProvider):
    """The offline model, telling the test when a call starts and whether it was closed unfinished."""

    def __init__(self) -> None:
        super().__init__(first_token_delay=0, chunk_delay=0)
        self.called = asyncio.Event()
        self.closed_unfinished = 0

    async def stream(
        self, messages: Sequence[LLMMessage], *, tools: Sequence[ToolSpec] = (),
        options: CompletionOptions | None = None,
    ) -> AsyncIterator[LLMEvent]:
        self.called.set()
        finished = False
        try:
            async for event in super().stream(messages, tools=tools, options=options or CompletionOptions()):
                yield event
            finished = True
        finally:
            if not finished:
                self.closed_unfinished += 1


def _other_session() -> AgentSession:
    now = utcnow()
    return AgentSession(
        id=uuid.uuid4().hex, profile_name="default", status=SessionStatus.COMPLETED.value, user_context={},
        transcript=[], run_state=None, pending_question=None, last_seq=0, current_run_id=None,
        created_at=now, updated_at=now,
    )


async def _session_with_one_turn(agent) -> str:
    first = await agent.execute("what is 2+2")
    assert first.status == 200 and first.last.type.value == "COMPLETE"
    return first.events[0].session_id


async def test_the_model_call_overlaps_the_claim(agent_factory, db) -> None:
    model = ObservedModel()
    async with agent_factory(provider=model) as agent:
        session_id = await _session_with_one_turn(agent)
        model.called.clear()
        async with db.sessionmaker() as blocker:
            other = _other_session()
            blocker.add(other)
            await blocker.flush()
            blocker.add(AgentRun(id=uuid.uuid4().hex, session_id=other.id, idempotency_key=KEY,
                                 status=SessionStatus.CANCELLED.value, first_seq=1, started_at=utcnow()))
            await blocker.flush()
            execute = asyncio.create_task(
                agent.execute("what is 17*23", body={"session_id": session_id},
                              headers=agent.headers(**{"Idempotency-Key": KEY}))
            )
            # The model is called while the claim cannot commit.
            await asyncio.wait_for(model.called.wait(), 10)
            assert not execute.done()
            async with db.sessionmaker() as reader:
                assert (await reader.get(AgentSession, session_id)).status == SessionStatus.COMPLETED.value
            await blocker.rollback()
        second = await asyncio.wait_for(execute, 20)
    assert second.status == 200, second.body
    seqs = [e.seq for e in second.events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))) and seqs[-1] == await db.events(session_id)
    assert second.last.type.value == "COMPLETE" and "391" in second.last.data["answer"]
    assert await db.runs(session_id) == 2


async def test_a_failed_claim_leaves_no_trace_of_the_run(agent_factory, db) -> None:
    model = ObservedModel()
    async with agent_factory(provider=model) as agent:
        session_id = await _session_with_one_turn(agent)
        events_before = await db.events(session_id)
        model.called.clear()
        # A model still streaming when the claim fails (the run reads ahead of what it emits, so a
        # model that answers at once would have finished by then): its call must be cut short.
        model.chunk_delay = 30
        async with db.sessionmaker() as blocker:
            # Another replica's run claims the session first (its row and the session's status).
            other_run = uuid.uuid4().hex
            blocker.add(AgentRun(id=other_run, session_id=session_id, idempotency_key=None,
                                 status=SessionStatus.ACTIVE.value, first_seq=events_before + 1,
                                 started_at=utcnow()))
            await blocker.flush()
            session = await blocker.get(AgentSession, session_id)
            session.status, session.current_run_id = SessionStatus.ACTIVE.value, other_run
            await blocker.flush()
            execute = asyncio.create_task(agent.execute("what is 17*23", body={"session_id": session_id}))
            if db.engine.dialect.name == "sqlite":
                # The service read the session as COMPLETED (the last committed state), started the
                # model call, and its claim waits for the write lock held here.
                await asyncio.wait_for(model.called.wait(), 10)
            # (PostgreSQL: its read of the session waits for this row lock, and then sees ACTIVE.)
            await blocker.commit()
        result = await asyncio.wait_for(execute, 20)
        assert result.status == 409 and result.body["error"] == "run_in_progress"
        # Whether or not its model call had started, the refused run wrote nothing and its call stopped.
        assert await db.events(session_id) == events_before
        assert model.closed_unfinished == (1 if model.called.is_set() else 0)
        async with db.sessionmaker() as reader:
            runs = (await reader.scalars(select(AgentRun).where(AgentRun.session_id == session_id))).all()
            assert {r.id for r in runs if r.status == SessionStatus.ACTIVE.value} == {other_run}
            assert (await reader.scalar(select(AgentEvent.seq).where(AgentEvent.session_id == session_id)
                                        .order_by(AgentEvent.seq.desc()).limit(1))) == events_before
        assert agent.app.state.agent.run_manager.get(session_id) is None  # type: ignore[attr-defined]


async def test_a_session_changed_elsewhere_starts_from_the_database(agent_factory, db) -> None:
    """This process completed the session's last run, but another replica ran it since: the early
    call from the remembered transcript is dropped and the run continues the stored one."""
    async with agent_factory() as agent:
        session_id = await _session_with_one_turn(agent)
        async with db.sessionmaker() as writer:
            session = await writer.get(AgentSession, session_id)
            session.transcript = [*session.transcript, {"role": "user", "content": "my name is Ada"},
                                  {"role": "assistant", "content": "Nice to meet you, Ada."}]
            session.current_run_id, session.last_seq = uuid.uuid4().hex, session.last_seq + 5
            last_seq = session.last_seq
            await writer.commit()
        result = await agent.execute("what is my name?", body={"session_id": session_id})
    assert result.status == 200, result.body
    assert result.events[0].seq == last_seq + 1
    assert result.last.type.value == "COMPLETE" and "Ada" in result.last.data["answer"]
