"""Revision a0003 adds the lease columns and their index, and takes them away again."""

from __future__ import annotations

from sqlalchemy import inspect

from agent_service.migrate import run_migrations
from shared.db import create_engine

LEASE_COLUMNS = {"owner_id", "lease_expires_at", "cancel_requested_at"}


async def _runs_schema(engine) -> tuple[set[str], set[str]]:
    async with engine.connect() as conn:
        def read(sync) -> tuple[set[str], set[str]]:
            inspector = inspect(sync)
            columns = {c["name"] for c in inspector.get_columns("agent_runs")}
            return columns, {i["name"] for i in inspector.get_indexes("agent_runs")}

        return await conn.run_sync(read)


async def _runs_constraints(engine) -> tuple[list[list[str]], list[str]]:
    async with engine.connect() as conn:
        def read(sync) -> tuple[list[list[str]], list[str]]:
            inspector = inspect(sync)
            uniques = [u["column_names"] for u in inspector.get_unique_constraints("agent_runs")]
            return uniques, [fk["referred_table"] for fk in inspector.get_foreign_keys("agent_runs")]

        return await conn.run_sync(read)


async def test_a0003_upgrade_downgrade_upgrade(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        await run_migrations(engine, "upgrade", "a0003")
        columns, indexes = await _runs_schema(engine)
        assert LEASE_COLUMNS <= columns and "ix_agent_runs_status_lease" in indexes

        await run_migrations(engine, "downgrade", "a0002")
        columns, indexes = await _runs_schema(engine)
        assert not (LEASE_COLUMNS & columns) and "ix_agent_runs_status_lease" not in indexes
        # What a0002 had is intact.
        assert {"id", "session_id", "idempotency_key", "status", "first_seq"} <= columns
        assert "ix_agent_runs_session_id" in indexes
        # SQLite rebuilds the table to drop columns: the constraints must come through it.
        assert await _runs_constraints(engine) == ([["idempotency_key"]], ["agent_sessions"])

        await run_migrations(engine, "upgrade", "head")
        columns, _ = await _runs_schema(engine)
        assert LEASE_COLUMNS <= columns
        assert await _runs_constraints(engine) == ([["idempotency_key"]], ["agent_sessions"])
    finally:
        await engine.dispose()
