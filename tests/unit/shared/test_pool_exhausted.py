"""A burst that takes every pooled connection: a request is told to come back (503 with Retry-After),
not answered 500, and background work waits for a connection instead of failing."""

from __future__ import annotations

import asyncio

import httpx
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from shared.http_contract import install_storage_errors
from shared.transactions import Transactions, is_unavailable


def _engine(tmp_path):
    # One connection and a short wait, so "the pool is exhausted" happens at once.
    return create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/pool.db", pool_size=1, max_overflow=0, pool_timeout=0.2)


async def test_an_exhausted_pool_is_a_503_with_retry_after(tmp_path) -> None:
    engine = _engine(tmp_path)
    app = FastAPI()
    install_storage_errors(app)

    @app.get("/read")
    async def read() -> dict:
        async with engine.connect() as conn:
            return {"one": (await conn.execute(text("SELECT 1"))).scalar()}

    try:
        async with engine.connect(), httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as http:
            resp = await http.get("/read")
        assert resp.status_code == 503 and resp.headers["retry-after"] == "2"
        assert resp.json()["error"] == "storage_unavailable"
    finally:
        await engine.dispose()


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
