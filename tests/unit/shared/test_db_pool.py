"""The pools: a connection the PostgreSQL server closed is replaced at checkout, without a ping per
checkout; the connections a burst opened are kept for the next one; a pool with none free in time
is overload (503), not a failure."""

from __future__ import annotations

import asyncio

import asyncpg
import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import create_async_engine

from shared.db import SQLITE_POOL_SIZE, create_engine
from shared.http_contract import STORAGE_RETRY_AFTER_S, install_storage_errors
from tests.support.databases import POSTGRES_ADMIN_DSN, backends, fresh_database


@pytest.mark.skipif("postgres" not in backends(), reason="PostgreSQL pool behaviour")
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


@pytest.mark.parametrize("backend", backends())
async def test_the_connections_a_burst_opened_serve_the_next_burst(backend: str, tmp_path) -> None:
    """No overflow that is closed on return: a burst past ``pool_size`` used to open (and then close)
    a connection per statement above it, each costing milliseconds of the service's CPU."""
    async with fresh_database(backend, tmp_path) as url:
        engine = create_engine(url, pool_size=3)
        opened: list[object] = []
        event.listen(engine.sync_engine, "connect", lambda conn, _record: opened.append(conn))
        try:
            at_once = 6 if backend == "postgres" else SQLITE_POOL_SIZE  # the most either holds

            async def burst() -> None:
                connections = [await engine.connect() for _ in range(at_once)]
                for conn in connections:
                    await conn.execute(text("SELECT 1"))
                for conn in connections:
                    await conn.close()

            await burst()
            assert len(opened) == at_once
            for _ in range(3):
                await burst()
            assert len(opened) == at_once, "a later burst opened connections again"
            assert engine.pool.checkedin() == at_once
        finally:
            await engine.dispose()


async def test_a_pool_with_no_connection_free_in_time_is_answered_503_with_retry_after(tmp_path) -> None:
    """Overload, not a fault: every pooled connection stayed busy past the pool's timeout (a burst of
    runs whose recalls ran late held them). DESIGN §8: a visible wait or 503, never a 500."""
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'pool.db'}", pool_size=1, max_overflow=0,
                                 pool_timeout=0.1)
    app = FastAPI()
    install_storage_errors(app)

    @app.get("/read")
    async def read() -> dict[str, int]:
        async with engine.connect() as conn:
            return {"one": (await conn.execute(text("SELECT 1"))).scalar_one()}

    held = await engine.connect()
    try:
        await held.execute(text("SELECT 1"))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            busy = await client.get("/read")
            assert busy.status_code == 503
            assert busy.headers["Retry-After"] == str(STORAGE_RETRY_AFTER_S)
            assert busy.json()["error"] == "storage_unavailable"
            await held.close()
            assert (await client.get("/read")).json() == {"one": 1}  # a connection is free again
    finally:
        await held.close()
        await engine.dispose()
