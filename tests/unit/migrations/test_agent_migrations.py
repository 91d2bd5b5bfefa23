"""The Agent Service migrations apply, revert and re-apply cleanly on SQLite and PostgreSQL."""

from __future__ import annotations

from sqlalchemy import inspect

from agent_service.migrate import run_migrations
from shared.db import create_engine

AGENT_TABLES = {"agent_sessions", "agent_runs", "agent_events"}


async def _tables(engine) -> set[str]:
    async with engine.connect() as conn:
        return set(await conn.run_sync(lambda sync: inspect(sync).get_table_names()))


async def test_upgrade_downgrade_upgrade(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        await run_migrations(engine, "upgrade", "head")
        assert AGENT_TABLES <= await _tables(engine)

        await run_migrations(engine, "downgrade", "base")
        assert not (AGENT_TABLES & await _tables(engine))

        await run_migrations(engine, "upgrade", "head")
        tables = await _tables(engine)
        assert AGENT_TABLES <= tables
        assert "alembic_version_agent" in tables
    finally:
        await engine.dispose()


async def test_idempotency_key_is_unique(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        await run_migrations(engine)
        async with engine.connect() as conn:
            uniques = await conn.run_sync(lambda sync: inspect(sync).get_unique_constraints("agent_runs"))
        assert any(u["column_names"] == ["idempotency_key"] for u in uniques)
    finally:
        await engine.dispose()
