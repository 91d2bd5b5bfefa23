"""The statements a run's own bookkeeping costs: its claim, its memory recall, its terminal write and
its memory write. The event log's group commits are shared by every run streaming at the time and
are not counted here (``test_event_log``). Each statement is a round trip and, on the loop, a
fraction of a millisecond of the service's CPU: one more per run shows up here before it shows up
in the per-run CPU figure of docs/benchmarks.md."""

from __future__ import annotations

import asyncio
import re
from typing import Self

from sqlalchemy import event as sa_event
from sqlalchemy import text
from sqlalchemy.engine import make_url

from agent_service.events.live_tail import build_notifier
from agent_service.migrate import run_migrations
from agent_service.repository import RunEnd, RunRepository, SessionRepository
from shared.db import create_engine, create_sessionmaker
from shared.llm.base import LLMDone, TextDelta, ToolCall
from shared.protocol import EventEnvelope, EventType, SessionStatus, utcnow
from shared.transactions import autocommit, transaction
from tests.support.models import ScriptedModelBase

GROUP_COMMIT_TASK = "agent-event-writer"
ALICE = {"user_id": "alice", "org_id": "acme"}
_TABLE = re.compile(r"\b(agent_\w+|pg_notify)\b")


def _kind(statement: str) -> str:
    """``INSERT agent_runs``, ``SELECT agent_memories``..."""
    verb = statement.split(None, 1)[0].upper()
    table = _TABLE.search(statement)
    return f"{verb} {table.group(1).removesuffix('_fts') if table else '?'}"  # SQLite's full-text index


class RunStatements:
    """The statements executed outside the group commit while recording (``kinds``), and those of the
    group commit (``group_commit``: one list per transaction)."""

    def __init__(self, engine) -> None:
        self.engine = engine.sync_engine
        self.kinds: list[str] = []
        self.group_commit: list[list[str]] = []

    def _record(self, _conn, _cursor, statement, _params, _context, _many) -> None:
        task = asyncio.current_task()
        if task is None or task.get_name() != GROUP_COMMIT_TASK:
            self.kinds.append(_kind(statement))
        elif self.group_commit:
            self.group_commit[-1].append(_kind(statement))

    def _begin(self, _conn) -> None:
        task = asyncio.current_task()
        if task is not None and task.get_name() == GROUP_COMMIT_TASK:
            self.group_commit.append([])

    def __enter__(self) -> Self:
        sa_event.listen(self.engine, "before_cursor_execute", self._record)
        sa_event.listen(self.engine, "begin", self._begin)
        return self

    def __exit__(self, *_exc: object) -> None:
        sa_event.remove(self.engine, "before_cursor_execute", self._record)
        sa_event.remove(self.engine, "begin", self._begin)


def _new_session_claim(postgres: bool) -> list[str]:
    # The session's row and its first run's: on PostgreSQL one statement (in the claim's transaction).
    return ["WITH agent_sessions"] if postgres else ["INSERT agent_sessions", "INSERT agent_runs"]


def _session_claim(postgres: bool) -> list[str]:
    # After the session's row is read and locked: claimed, and the run's row written if it was.
    return ["WITH agent_sessions"] if postgres else ["UPDATE agent_sessions", "INSERT agent_runs"]


def _terminal(postgres: bool) -> list[str]:
    # The run's end (ownership checked), the session's state after it with the log's end, the event:
    # on PostgreSQL one statement (data-modifying CTEs) that also tells followers in other processes
    # (its NOTIFY), run in autocommit: no BEGIN and COMMIT around it.
    if postgres:
        return ["WITH agent_runs"]
    return ["UPDATE agent_runs", "UPDATE agent_sessions", "INSERT agent_events"]


async def test_a_run_costs_its_claim_recall_terminal_write_and_memory_write_and_nothing_else(agent_factory) -> None:
    async with agent_factory() as agent:
        state = agent.app.state.agent
        postgres = state.db_engine.dialect.name == "postgresql"
        await agent.execute("warm up", body={"user_context": ALICE})
        await state.memory.written()
        with RunStatements(state.db_engine) as first:
            result = await agent.execute("what is my favourite colour?", body={"user_context": ALICE})
            await state.memory.written()
        assert result.last.type.value == "COMPLETE"
        # In no fixed order: the recall runs while the claim commits (the run starts early).
        assert sorted(first.kinds) == sorted([
            *_new_session_claim(postgres),
            "SELECT agent_memories",  # recall
            *_terminal(postgres),
            "INSERT agent_memories",  # remember, after the end
        ])
        with RunStatements(state.db_engine) as next_message:
            result = await agent.execute(
                "and my favourite food?", body={"user_context": ALICE, "session_id": result.last.session_id})
            await state.memory.written()
        assert result.last.type.value == "COMPLETE"
        assert sorted(next_message.kinds) == sorted([
            "SELECT agent_sessions", *_session_claim(postgres),
            "SELECT agent_memories",
            *_terminal(postgres),
            "INSERT agent_memories",
        ])


class TwoToolSteps(ScriptedModelBase):
    """Calls the calculator, then (with its result) the clock, then answers: two steps that end with
    tool results, each a checkpoint after the model turn and after the call."""

    async def reply(self, messages, tools):
        done = sum(1 for m in messages if m.role == "tool")
        if done < 2:
            yield TextDelta(f"step {done} ")
            name, args = ("calculator", {"expression": "2+3"}) if done == 0 else ("current_time", {})
            yield ToolCall(id=f"call-{done}", name=name, arguments=args)
        else:
            yield TextDelta("done")
        yield LLMDone(prompt_tokens=1, completion_tokens=1)


async def test_a_step_costs_no_statement_of_its_own_and_one_in_a_group_commit(agent_factory) -> None:
    """A checkpoint is written inside the group commit that writes its step's events (or a later one):
    no transaction and no statement of the run's own, and one statement in the group commit whatever
    the number of checkpoints in it (PostgreSQL: one JSON document; SQLite: one executemany)."""
    async with agent_factory(provider=TwoToolSteps()) as agent:
        state = agent.app.state.agent
        postgres = state.db_engine.dialect.name == "postgresql"
        await agent.execute("warm up", body={"user_context": ALICE})
        await state.memory.written()
        with RunStatements(state.db_engine) as run:
            result = await agent.execute("two steps", body={"user_context": ALICE})
            await state.memory.written()
            await state.run_manager._log.writer.flush()
        assert result.last.type.value == "COMPLETE" and len(result.of_type("TOOL_END")) == 2
        assert sorted(run.kinds) == sorted([
            *_new_session_claim(postgres), "SELECT agent_memories", *_terminal(postgres), "INSERT agent_memories",
        ])
        checkpoints = [kinds.count("UPDATE agent_runs") for kinds in run.group_commit]
        # Up to four checkpoints (two model turns, two results), in as many group commits at most.
        assert 1 <= sum(checkpoints) <= 4 and max(checkpoints) == 1
        for kinds in run.group_commit:
            if "UPDATE agent_runs" in kinds:
                # After the batch's events, and before the check that the run is still this process's.
                assert kinds.index("UPDATE agent_runs") < kinds.index("SELECT agent_runs"), kinds


async def _session_with_a_run(sessionmaker, session_id: str, run_id: str, owner: str) -> None:
    now = utcnow()
    async with transaction(sessionmaker) as db:
        await SessionRepository(db).insert(
            id=session_id, profile_name="default", status=SessionStatus.ACTIVE.value, user_context=ALICE,
            transcript=[], run_state=None, pending_question=None, last_seq=0, seq_reserved=8, current_run_id=run_id,
            created_at=now, updated_at=now,
        )
        await RunRepository(db).insert(
            id=run_id, session_id=session_id, idempotency_key=None, status=SessionStatus.ACTIVE.value, first_seq=1,
            started_at=now, owner_id=owner, lease_expires_at=now, traceparent=None,
        )


async def test_on_postgres_the_terminal_statement_tells_followers_itself_and_only_when_it_writes(
    postgres_url: str,
) -> None:
    """The terminal write runs in autocommit, one statement with its NOTIFY: a follower is woken at the
    end's seq when the run was this process's, and not at all when it was taken over (nothing written)."""
    engine = create_engine(postgres_url)
    await run_migrations(engine, "upgrade", "head")
    sessionmaker = create_sessionmaker(engine)
    notifier = build_notifier(make_url(postgres_url), fallback_poll_s=5, local_poll_s=0.5)
    await notifier.start()
    try:
        await _session_with_a_run(sessionmaker, "s-ended", "r-ended", owner="me")
        await _session_with_a_run(sessionmaker, "s-taken", "r-taken", owner="another replica")
        with notifier.watch("s-taken") as taken, notifier.watch("s-ended") as ended:
            for session_id, run_id in (("s-taken", "r-taken"), ("s-ended", "r-ended")):
                end = RunEnd(run_id, "me", SessionStatus.COMPLETED.value, utcnow())
                event = EventEnvelope(session_id=session_id, run_id=run_id, seq=3, type=EventType.COMPLETE,
                                      ts=utcnow(), data={"answer": "done"})
                async with autocommit(sessionmaker) as db:
                    written = await RunRepository(db).end(
                        end, event, {"status": SessionStatus.COMPLETED.value}, notifier.notification(session_id, 3))
                assert written is (session_id == "s-ended")
            # Notifications arrive in commit order on the one listening connection: once the second
            # end's is in, the first one's would have been.
            await asyncio.wait_for(ended.changed.wait(), 5)
            assert ended.seq == 3 and not taken.changed.is_set()
        async with sessionmaker() as db:
            logged = (await db.execute(text("SELECT session_id, seq, type FROM agent_events ORDER BY session_id"))).all()
            statuses = dict((await db.execute(text("SELECT id, status FROM agent_sessions"))).all())
        assert [tuple(row) for row in logged] == [("s-ended", 3, "COMPLETE")]
        assert statuses == {"s-ended": "COMPLETED", "s-taken": "ACTIVE"}
    finally:
        await notifier.aclose()
        await engine.dispose()
