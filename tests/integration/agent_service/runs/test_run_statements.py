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

GROUP_COMMIT_TASK = "agent-event-writer"
ALICE = {"user_id": "alice", "org_id": "acme"}
_TABLE = re.compile(r"\b(agent_\w+|pg_notify)\b")


def _kind(statement: str) -> str:
    """``INSERT agent_runs``, ``SELECT agent_memories``..."""
    verb = statement.split(None, 1)[0].upper()
    table = _TABLE.search(statement)
    return f"{verb} {table.group(1).removesuffix('_fts') if table else '?'}"  # SQLite's full-text index


class RunStatements:
    """The statements executed outside the group commit while recording."""

    def __init__(self, engine) -> None:
        self.engine = engine.sync_engine
        self.kinds: list[str] = []

    def _record(self, _conn, _cursor, statement, _params, _context, _many) -> None:
        task = asyncio.current_task()
        if task is None or task.get_name() != GROUP_COMMIT_TASK:
            self.kinds.append(_kind(statement))

    def __enter__(self) -> Self:
        sa_event.listen(self.engine, "before_cursor_execute", self._record)
        return self

    def __exit__(self, *_exc: object) -> None:
        sa_event.remove(self.engine, "before_cursor_execute", self._record)


def _terminal(postgres: bool) -> list[str]:
    # The run's end (ownership checked), the session's state after it with the log's end, the event:
    # on PostgreSQL one statement (data-modifying CTEs), and followers in other processes are told
    # (NOTIFY) in the same transaction.
    if postgres:
        return ["WITH agent_runs", "SELECT pg_notify"]
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
            "INSERT agent_sessions", "INSERT agent_runs",  # the claim of a new session
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
            "SELECT agent_sessions", "UPDATE agent_sessions", "INSERT agent_runs",  # the claim of the session
            "SELECT agent_memories",
            *_terminal(postgres),
            "INSERT agent_memories",
        ])
