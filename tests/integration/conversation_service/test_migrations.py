"""Every conversation revision upgrade -> downgrade -> upgrade on SQLite and PostgreSQL; the models match."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from conversation_service.db import migrate
from conversation_service.db.models import Base
from shared.db import create_engine

CHAT = {"conversations", "messages", "conversation_frames"}
AGENT = {"conversation_agent_sessions", "pending_interactions", "dead_letters", "conversation_summaries"}
TURNS = {"turns"}
SIGN_IN = {"auth_sessions"}
HEAD = "c0011_turn_trace_context"
# Columns each revision after c0002 adds, newest first: a downgrade past it removes them.
ADDED_COLUMNS = [
    ("c0010_a2a_agents", "conversation_agent_sessions", {"agent_name", "a2a_task_id"}),
    ("c0008_seq_without_redis", "conversations", {"seq_without_redis"}),
    ("c0007_reply_control", "turns", {"stop_requested_at"}),
    ("c0006", "conversations", {"deleted_at"}),
    ("c0004_dead_letter_replays", "dead_letters", {"replayed_at", "replay_outcome", "replay_detail"}),
    ("c0003", "conversations", {"seq_reserved"}),
]


async def _columns(engine, table: str) -> set[str]:
    def read(c) -> set[str]:
        inspector = inspect(c)
        return {col["name"] for col in inspector.get_columns(table)} if inspector.has_table(table) else set()

    async with engine.connect() as conn:
        return await conn.run_sync(read)


async def _current_revision(engine) -> str | None:
    async with engine.connect() as conn:
        return await conn.run_sync(lambda c: MigrationContext.configure(c).get_current_revision())


async def _table_names(engine) -> set[str]:
    async with engine.connect() as conn:
        return set(await conn.run_sync(lambda c: inspect(c).get_table_names()))


async def _added_columns_present(engine) -> list[bool]:
    return [bool(columns & await _columns(engine, table)) for _, table, columns in ADDED_COLUMNS]


async def test_upgrade_downgrade_upgrade(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        await migrate.upgrade(engine)
        assert await _current_revision(engine) == HEAD
        assert CHAT | AGENT | TURNS | SIGN_IN <= await _table_names(engine)
        assert all(await _added_columns_present(engine))
        async with engine.connect() as conn:
            diff = await conn.run_sync(
                lambda c: compare_metadata(MigrationContext.configure(c, opts={"compare_type": True}), Base.metadata)
            )
        assert diff == []

        await migrate.downgrade(engine, "c0002")
        assert await _current_revision(engine) == "c0002"
        assert not any(await _added_columns_present(engine))
        assert not ((TURNS | SIGN_IN) & await _table_names(engine))
        await migrate.downgrade(engine, "c0001")
        tables = await _table_names(engine)
        assert CHAT <= tables and not (AGENT & tables)
        await migrate.downgrade(engine, "base")
        assert not ((CHAT | AGENT | TURNS | SIGN_IN) & await _table_names(engine))
        await migrate.upgrade(engine)
        assert await _current_revision(engine) == HEAD
        assert all(await _added_columns_present(engine))
    finally:
        await engine.dispose()


async def _insert_message(engine, message_id: str, status: str, role: str = "assistant") -> None:
    async with engine.begin() as conn:
        await conn.execute(text(
            "INSERT INTO messages (id, conversation_id, role, content, status, created_at)"
            " VALUES (:id, 'c1', :role, 'so far', :status, CURRENT_TIMESTAMP)"
        ), {"id": message_id, "status": status, "role": role})


async def _statuses(engine) -> dict[str, str]:
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT id, status FROM messages"))
        return {row.id: row.status for row in rows}


async def test_c0007_message_statuses_keep_their_check(database_url: str) -> None:
    """c0007 widens the status check to stopped and replaced, still refusing anything else; its
    downgrade turns them into statuses the older schema knows."""
    engine = create_engine(database_url)
    try:
        await migrate.upgrade(engine)
        async with engine.begin() as conn:
            await conn.execute(text(
                "INSERT INTO conversations (id, owner_id, title, created_at, updated_at, last_seq, seq_reserved)"
                " VALUES ('c1', 'alice', '', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, 0, 0)"
            ))
        await _insert_message(engine, "m-stopped", "stopped")
        await _insert_message(engine, "m-replaced", "replaced")
        with pytest.raises(IntegrityError):
            await _insert_message(engine, "m-bogus", "bogus")
        with pytest.raises(IntegrityError):  # the table's other checks are kept
            await _insert_message(engine, "m-robot", "complete", role="robot")

        await migrate.downgrade(engine, "c0006")
        assert await _statuses(engine) == {"m-stopped": "complete", "m-replaced": "error"}
        await migrate.downgrade(engine, "c0004_dead_letter_replays")  # its messages stay as the table changes
        assert await _statuses(engine) == {"m-stopped": "complete", "m-replaced": "error"}
        with pytest.raises(IntegrityError):
            await _insert_message(engine, "m-stopped-again", "stopped")
        await migrate.upgrade(engine)
        await _insert_message(engine, "m-stopped-again", "stopped")
    finally:
        await engine.dispose()
