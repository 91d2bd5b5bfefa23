"""The SQLite write gate: one write transaction at a time per engine, waiting on the loop, not in
SQLite's busy handler."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from shared import db
from shared.fastpath import sqlite_gate
from tests.support.faults import cancel_statements, held_by


@pytest.fixture
async def engine(tmp_path):
    engine = db.create_engine(f"sqlite+aiosqlite:///{tmp_path / 'gate.db'}")
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, who TEXT)"))
    yield engine
    await engine.dispose()


async def _hold_write(engine, wrote: asyncio.Event, release: asyncio.Event, *, fail: bool = False) -> None:
    """Insert a row, then keep the transaction open until ``release``; commit, or roll back."""
    async with engine.connect() as conn:
        await conn.execute(text("INSERT INTO t (who) VALUES ('first')"))
        wrote.set()
        await release.wait()
        if fail:
            await conn.rollback()
        else:
            await conn.commit()


async def _insert(engine, who: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO t (who) VALUES (:who)"), {"who": who})


async def _rows(engine) -> list[str]:
    async with engine.connect() as conn:
        return [row.who for row in await conn.execute(text("SELECT who FROM t ORDER BY id"))]


async def test_a_second_writer_waits_its_turn_and_goes_on_after_the_commit(engine) -> None:
    wrote, release = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(_hold_write(engine, wrote, release))
    await wrote.wait()
    second = asyncio.create_task(_insert(engine, "second"))
    # Reads do not take the gate: the row being written is not visible, the rest is readable.
    assert await asyncio.wait_for(_rows(engine), 5) == []
    assert not second.done()
    release.set()
    await asyncio.wait_for(asyncio.gather(holder, second), 10)
    assert await _rows(engine) == ["first", "second"]


async def test_a_rollback_gives_the_turn_back(engine) -> None:
    wrote, release = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(_hold_write(engine, wrote, release, fail=True))
    await wrote.wait()
    second = asyncio.create_task(_insert(engine, "second"))
    release.set()
    await asyncio.wait_for(asyncio.gather(holder, second), 10)
    assert await _rows(engine) == ["second"]


async def test_a_writer_that_gets_no_turn_fails_with_a_clear_error(engine, monkeypatch) -> None:
    monkeypatch.setattr(sqlite_gate, "WRITE_WAIT_S", 0.2)
    wrote, release = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(_hold_write(engine, wrote, release))
    await wrote.wait()
    with pytest.raises(OperationalError) as caught:
        await _insert(engine, "second")
    # This process's gate answered (SQLite's busy handler would have waited 30 s), as the
    # driver's own "database is locked" error would be raised, so callers handle both alike.
    assert isinstance(caught.value.orig, sqlite3.OperationalError)
    assert "database is locked: no write turn within" in str(caught.value)
    release.set()
    await holder
    await _insert(engine, "third")  # the gate is free again
    assert await _rows(engine) == ["first", "third"]


async def test_many_concurrent_writers_all_commit(engine) -> None:
    await asyncio.wait_for(asyncio.gather(*(_insert(engine, f"w{i}") for i in range(50))), 30)
    assert sorted(await _rows(engine)) == sorted(f"w{i}" for i in range(50))


@pytest.mark.parametrize("statement", ["INSERT INTO t (who) VALUES ('cancelled') RETURNING id", "UPDATE t SET who = 'x'"])
async def test_a_statement_cancelled_half_way_leaves_the_database_free_for_the_next_writer(
    engine, statement: str,
) -> None:
    # A task cancelled while its write is in the driver (a timeout around a store call): the cursor
    # of an INSERT ... RETURNING still had its rows. Dropping the connection left SQLite's write lock
    # held until a garbage collection, the gate free: every writer then failed after 30 s.
    async def write() -> None:
        async with engine.begin() as conn:
            await conn.execute(text(statement))

    with cancel_statements(engine, where=lambda sql: sql.startswith(statement[:6])) as cancelled:
        victim = asyncio.create_task(write())
        with pytest.raises(asyncio.CancelledError):
            await victim
    assert cancelled
    assert await held_by(engine) == []
    async with asyncio.timeout(2):
        await _insert(engine, "next")
    assert "next" in await _rows(engine)
