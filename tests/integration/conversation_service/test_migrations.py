"""Every conversation revision upgrade -> downgrade -> upgrade on SQLite and PostgreSQL; the models match."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from conversation_service.db import migrate
from conversation_service.db.models import Base
from shared.db import create_engine

CHAT = {"conversations", "messages", "conversation_frames"}
AGENT = {"conversation_agent_sessions", "pending_interactions", "dead_letters", "conversation_summaries"}
TURNS = {"turns"}
HEAD = "c0006"
# Columns each revision after c0002 adds, newest first: a downgrade past it removes them.
ADDED_COLUMNS = [
    ("c0006", "conversations", {"deleted_at"}),
    ("c0004_dead_letter_replays", "dead_letters", {"replayed_at", "replay_outcome", "replay_detail"}),
    ("c0003", "conversations", {"seq_reserved"}),
]


async def _columns(engine, table: str) -> set[str]:
    async with engine.connect() as conn:
        return await conn.run_sync(lambda c: {col["name"] for col in inspect(c).get_columns(table)})


async def _added_columns_present(engine) -> list[bool]:
    return [bool(columns & await _columns(engine, table)) for _, table, columns in ADDED_COLUMNS]


async def test_upgrade_downgrade_upgrade(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        await migrate.upgrade(engine)
        assert await migrate.current_revision(engine) == HEAD
        assert CHAT | AGENT | TURNS <= await migrate.table_names(engine)
        assert all(await _added_columns_present(engine))
        async with engine.connect() as conn:
            diff = await conn.run_sync(
                lambda c: compare_metadata(MigrationContext.configure(c, opts={"compare_type": True}), Base.metadata)
            )
        assert diff == []

        await migrate.downgrade(engine, "c0002")
        assert await migrate.current_revision(engine) == "c0002"
        assert not any(await _added_columns_present(engine))
        assert not (TURNS & await migrate.table_names(engine))
        await migrate.downgrade(engine, "c0001")
        tables = await migrate.table_names(engine)
        assert CHAT <= tables and not (AGENT & tables)
        await migrate.downgrade(engine, "base")
        assert not ((CHAT | AGENT | TURNS) & await migrate.table_names(engine))
        await migrate.upgrade(engine)
        assert await migrate.current_revision(engine) == HEAD
        assert all(await _added_columns_present(engine))
    finally:
        await engine.dispose()
