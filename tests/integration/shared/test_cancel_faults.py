"""Database calls cancelled at random points under load leave nothing held (SQLite and PostgreSQL).

200 transactions at once of the kinds the services make (INSERT ... RETURNING, a row locked and
updated, a batch insert, a read), through sessions and plain connections; about a third of their
statements cancel their task while in the driver, and random timeouts expire anywhere else. After
that: every pooled connection is checked in, the SQLite write gate is free and the file writable by
another connection, no PostgreSQL session of the database is in a transaction or holds a lock; and
the next transactions all succeed.
"""

from __future__ import annotations

import asyncio
import random

from sqlalchemy import Column, Integer, MetaData, String, Table, insert, select, update

from shared.db import create_engine, create_sessionmaker
from tests.support.faults import cancel_statements, held_by

metadata = MetaData()
items = Table("fault_items", metadata, Column("id", Integer, primary_key=True), Column("n", Integer),
              Column("note", String(40)))
TRANSACTIONS = 200


async def _transaction(engine, sessionmaker, rng: random.Random) -> None:
    kind = rng.randrange(4)
    if kind == 0:
        async with sessionmaker() as db, db.begin():
            row_id = (await db.execute(insert(items).values(n=0, note="new").returning(items.c.id))).scalar_one()
            await db.execute(update(items).where(items.c.id == row_id).values(n=1))
    elif kind == 1:
        async with engine.begin() as conn:
            locked = select(items.c.id).where(items.c.id == rng.randint(1, 20))
            if engine.dialect.name == "postgresql":
                locked = locked.with_for_update()
            row_id = (await conn.execute(locked)).scalar_one_or_none()
            if row_id is not None:
                await conn.execute(update(items).where(items.c.id == row_id).values(n=items.c.n + 1))
    elif kind == 2:
        async with sessionmaker() as db, db.begin():
            await db.execute(insert(items), [{"n": i, "note": "batch"} for i in range(20)])
    else:
        async with sessionmaker() as db:
            (await db.execute(select(items).order_by(items.c.id.desc()).limit(50))).all()


async def _with_faults(engine, sessionmaker, rng: random.Random) -> None:
    try:
        async with asyncio.timeout(rng.uniform(0.001, 1.0)):
            await _transaction(engine, sessionmaker, rng)
    except (asyncio.CancelledError, TimeoutError):
        pass  # what a timed-out caller or a client that went away leaves behind is the point


async def _until_nothing_held(engine) -> list[str]:
    """What is still held after 5 s (a late call may still be giving its connection back)."""
    async with asyncio.timeout(5):
        while held := await held_by(engine):
            await asyncio.sleep(0.05)  # connections given back by tasks still ending; nothing to await here
    return held


async def test_random_cancellations_under_load_leave_nothing_held(database_url: str) -> None:
    engine = create_engine(database_url)
    sessionmaker = create_sessionmaker(engine)
    rng = random.Random(20261127)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
            await conn.execute(insert(items), [{"n": 0, "note": "seed"} for _ in range(20)])
        with cancel_statements(engine, chance=0.3, rng=rng) as cancelled:
            victims = [asyncio.create_task(_with_faults(engine, sessionmaker, random.Random(rng.random())))
                       for _ in range(TRANSACTIONS)]
            results = await asyncio.gather(*victims, return_exceptions=True)
        assert [r for r in results if isinstance(r, BaseException)] == []
        assert len(cancelled) > 20, "the faults reached statements in the driver"
        try:
            assert await _until_nothing_held(engine) == []
        except TimeoutError:
            raise AssertionError(f"still held after 5 s: {await held_by(engine)}") from None
        async with asyncio.timeout(10):
            await asyncio.gather(*(_transaction(engine, sessionmaker, random.Random(i)) for i in range(50)))
        assert await held_by(engine) == []
    finally:
        async with engine.begin() as conn:
            await conn.run_sync(metadata.drop_all)
        await engine.dispose()
