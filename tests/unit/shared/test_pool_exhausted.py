"""A burst that takes every pooled connection: background work waits for a connection within its
budget instead of failing (a request is answered 503: tests/unit/shared/test_db_pool.py)."""

from __future__ import annotations

import asyncio

from sqlalchemy import text
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from shared.transactions import Transactions, is_unavailable


def _engine(tmp_path):
    # One connection and a short wait, so "the pool is exhausted" happens at once.
    return create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/pool.db", pool_size=1, max_overflow=0, pool_timeout=0.2)


async def test_background_work_waits_for_a_free_connection(tmp_path) -> None:
    engine = _engine(tmp_path)
    tx = Transactions(async_sessionmaker(engine), budget_s=10)
    try:
        held = await engine.connect()
        try:
            await engine.connect()
        except Exception as exc:  # noqa: BLE001 - the error under test
            assert is_unavailable(exc), exc
        else:
            raise AssertionError("a second connection was handed out of a pool of one")
        attempts: list[int] = []
        retried = asyncio.Event()

        async def work(session):
            attempts.append(1)
            if len(attempts) == 2:
                retried.set()  # the first attempt found no connection and was run again
            return await session.scalar(text("SELECT 41 + 1"))

        running = asyncio.ensure_future(tx.run(work))
        await asyncio.wait_for(retried.wait(), 10)
        await held.close()
        assert await running == 42
    finally:
        await engine.dispose()
