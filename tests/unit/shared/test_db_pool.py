"""PostgreSQL pool: a connection the server closed is replaced at checkout, without a ping per checkout."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from sqlalchemy import event, text

from shared.db import create_engine
from tests.support.databases import POSTGRES_ADMIN_DSN, backends, fresh_database

pytestmark = pytest.mark.skipif("postgres" not in backends(), reason="PostgreSQL pool behaviour")


async def test_a_connection_closed_by_the_server_is_replaced_and_no_checkout_pings(
    tmp_path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A ping is the driver's own ``fetchrow(";")``, below SQLAlchemy's statement events.
    fetched: list[str] = []
    fetchrow = asyncpg.Connection.fetchrow

    async def recorded_fetchrow(self, query, *args, **kwargs):
        fetched.append(query)
        return await fetchrow(self, query, *args, **kwargs)

    monkeypatch.setattr(asyncpg.Connection, "fetchrow", recorded_fetchrow)
    async with fresh_database("postgres", tmp_path) as url:
        engine = create_engine(url, pool_size=1)
        statements: list[str] = []
        event.listen(engine.sync_engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
        try:
            for _ in range(2):  # a new connection, then the same one from the pool
                async with engine.connect() as conn:
                    first_pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
                    driver = (await conn.get_raw_connection()).driver_connection
            # Back in the pool; the server ends it, as a restart or an idle timeout would.
            admin = await asyncpg.connect(POSTGRES_ADMIN_DSN)
            try:
                assert await admin.fetchval("SELECT pg_terminate_backend($1)", first_pid)
            finally:
                await admin.close()
            for _ in range(500):  # the loop reads the socket's end within a few milliseconds
                if driver.is_closed():
                    break
                await asyncio.sleep(0.01)
            assert driver.is_closed()
            async with engine.connect() as conn:
                second_pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
            assert second_pid != first_pid
            # Three checkouts, and only the test's own statements reached the server.
            assert statements == ["SELECT pg_backend_pid()"] * 3
            assert ";" not in fetched
        finally:
            await engine.dispose()
