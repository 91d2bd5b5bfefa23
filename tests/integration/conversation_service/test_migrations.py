"""c0001/c0002/c0003 upgrade -> downgrade -> upgrade on SQLite and PostgreSQL; the models match."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from conversation_service.db import migrate
from conversation_service.db.models import Base
from shared.db import create_engine

CHAT = {"conversations", "messages", "conversation_frames"}
AGENT = {"conversation_agent_sessions", "pending_interactions", "dead_letters", "conversation_summaries"}
TURNS = {"turns"}


async def test_upgrade_downgrade_upgrade(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        await migrate.upgrade(engine)
        assert await migrate.current_revision(engine) == "c0003"
        assert CHAT | AGENT | TURNS <= await migrate.table_names(engine)
        async with engine.connect() as conn:
            diff = await conn.run_sync(
                lambda c: compare_metadata(MigrationContext.configure(c, opts={"compare_type": True}), Base.metadata)
            )
        assert diff == []

        await migrate.downgrade(engine, "c0002")
        tables = await migrate.table_names(engine)
        assert CHAT | AGENT <= tables and not (TURNS & tables)
        await migrate.downgrade(engine, "c0001")
        tables = await migrate.table_names(engine)
        assert CHAT <= tables and not (AGENT & tables)
        await migrate.downgrade(engine, "base")
        assert not ((CHAT | AGENT | TURNS) & await migrate.table_names(engine))
        await migrate.upgrade(engine)
        assert await migrate.current_revision(engine) == "c0003"
    finally:
        await engine.dispose()
