"""A memory store call cancelled in the middle of its INSERT (as a timeout around it did) leaves the
agent's database as it found it: no connection, write turn or lock held, the next writes at once.

This was the burst stall: 200 runs at once, their memory writes timed out (2 s) while the INSERT ...
RETURNING ran; on SQLite the dropped connection kept the database's write lock until a garbage
collection, and every event batch, claim and lease renewal failed after 30 s in the busy handler.
"""

from __future__ import annotations

import asyncio

import pytest

from agent_service.memory.sql_store import SqlMemoryStore
from agent_service.memory.store import Owner
from agent_service.migrate import run_migrations
from shared.db import create_engine, create_sessionmaker
from shared.protocol import utcnow
from tests.support.faults import cancel_statements, held_by

ALICE = Owner("alice", "acme")


async def test_a_remember_cancelled_mid_insert_leaves_the_database_writable(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        await run_migrations(engine)
        store = SqlMemoryStore(create_sessionmaker(engine))
        with pytest.raises(TimeoutError):
            # The store call's timeout expires while its INSERT is in the driver.
            async with asyncio.timeout(30) as deadline:
                with cancel_statements(engine, where=lambda sql: sql.startswith("INSERT INTO agent_memories"),
                                       cancel=lambda _task: deadline.reschedule(-1)) as cancelled:
                    await store.remember(ALICE, "User: my favourite colour is green", "s1", utcnow())
        assert cancelled, "the INSERT was cancelled in the driver"
        assert await held_by(engine) == []
        async with asyncio.timeout(2):
            kept = await store.remember(ALICE, "User: my dog is called Rex", "s2", utcnow())
        assert [m.id for m in await store.list(ALICE, 10)] == [kept.id], "the cancelled write left nothing"
    finally:
        await engine.dispose()
