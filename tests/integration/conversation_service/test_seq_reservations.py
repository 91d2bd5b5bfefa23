"""Frame seqs are forever, against the real databases (SQLite and PostgreSQL) and a real Redis: a
seq handed out by a process that then dies (no close, nothing flushed) is never handed out again."""

from __future__ import annotations

import asyncio
import uuid
from urllib.parse import urlsplit

from conversation_service.db import migrate
from conversation_service.db.models import Conversation
from conversation_service.realtime.reservations import SeqReservations
from conversation_service.realtime.seq import InProcessSeqAllocator, RedisSeqAllocator
from shared.db import create_engine, create_sessionmaker
from shared.transactions import Transactions, transaction
from tests.support.dependencies import TcpRelay


async def _floor(conversation_id: str) -> int:
    return 0  # nothing persisted: what the database shows after a crash lost the last commit window


async def _setup(database_url: str):
    engine = create_engine(database_url)
    await migrate.upgrade(engine)
    sessionmaker = create_sessionmaker(engine)
    async with transaction(sessionmaker) as session:
        conversation = Conversation(owner_id="alice", title="t")
        session.add(conversation)
        await session.flush()
        cid = conversation.id
    return engine, SeqReservations(Transactions(sessionmaker, budget_s=5)), cid


async def test_in_process_seqs_survive_a_crash_and_a_clean_restart(database_url: str) -> None:
    engine, reservations, cid = await _setup(database_url)
    try:
        dead = InProcessSeqAllocator(_floor, reservations, block=8)
        seen = [await dead.next(cid) for _ in range(11)]  # two blocks; the process then dies
        assert seen == list(range(1, 12)) and await reservations.reserved(cid) == 16
        restarted = InProcessSeqAllocator(_floor, reservations, block=8)
        after_crash = [await restarted.next(cid) for _ in range(3)]
        assert after_crash == [17, 18, 19]  # 12..16 are a hole, never a reuse
        await restarted.close()
        assert await reservations.reserved(cid) == 19
        again = InProcessSeqAllocator(_floor, reservations, block=8)
        assert await again.next(cid) == 20  # a clean restart continues without a hole
    finally:
        await engine.dispose()


async def test_redis_seqs_restart_above_the_reservation_when_redis_loses_the_key(
    database_url: str, redis_url: str
) -> None:
    engine, reservations, cid = await _setup(database_url)
    prefix = f"test:{uuid.uuid4().hex}"
    a = RedisSeqAllocator(redis_url, prefix, _floor, reservations, block=5)
    b = RedisSeqAllocator(redis_url, prefix, _floor, reservations, block=5)
    try:
        seen = [await (a if i % 2 else b).next(cid) for i in range(12)]
        assert seen == list(range(1, 13))
        assert await reservations.reserved(cid) >= 12
        await a._redis.delete(f"{prefix}:seq:{cid}")  # Redis restarted without persistence
        fresh = RedisSeqAllocator(redis_url, prefix, _floor, reservations, block=5)
        try:
            assert await fresh.next(cid) > max(seen)
        finally:
            await fresh.close()
    finally:
        await a.close()
        await b.close()
        await engine.dispose()


async def test_redis_seqs_go_on_from_the_database_while_redis_is_away_and_are_never_handed_out_twice(
    database_url: str, redis_url: str
) -> None:
    """Replica A reaches Redis through a relay the test cuts, B directly: while A cannot reach it, A
    takes seqs from the reservation and B goes on counting in Redis; both before, during and after,
    no seq is handed out twice and each replica's seqs only grow."""
    engine, reservations, cid = await _setup(database_url)
    prefix = f"test:{uuid.uuid4().hex}"
    target = urlsplit(redis_url)
    relay = TcpRelay(target.port or 6379)
    await relay.start()
    a = RedisSeqAllocator(f"redis://127.0.0.1:{relay.port}{target.path}", prefix, _floor, reservations, block=5)
    b = RedisSeqAllocator(redis_url, prefix, _floor, reservations, block=5)
    handed: dict[str, list[int]] = {"a": [], "b": []}

    async def take(rounds: int) -> None:
        for _ in range(rounds):
            handed["a"].append(await a.next(cid))
            handed["b"].append(await b.next(cid))

    try:
        await take(4)
        relay.cut()
        await take(8)
        assert a.absence.away and not b.absence.away  # A went on without Redis, B with it
        relay.restore()
        for _ in range(40):  # A is back on Redis within its pause (at most 2 s)
            await take(1)
            if not a.absence.away:
                break
            await asyncio.sleep(0.1)
        assert not a.absence.away
        await take(4)
        await b._redis.delete(f"{prefix}:seq:{cid}")  # and then Redis loses the key (restarted empty)
        await take(4)
    finally:
        await a.close()
        await b.close()
        await relay.close()
        await engine.dispose()
    every = handed["a"] + handed["b"]
    assert len(every) == len(set(every)), f"a seq handed out twice: {handed}"
    for seqs in handed.values():
        assert seqs == sorted(seqs)
