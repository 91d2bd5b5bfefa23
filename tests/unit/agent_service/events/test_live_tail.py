"""The live tail notifier wakes a session's followers when (and only when) a transaction that adds its
events commits; on PostgreSQL through LISTEN/NOTIFY, also after the listening connection was lost."""

from __future__ import annotations

import asyncio

from sqlalchemy import text
from sqlalchemy.engine import make_url

from agent_service.events.live_tail import LocalNotifier, PostgresNotifier, build_notifier
from shared.db import create_engine, create_sessionmaker


class _Count:
    def __init__(self) -> None:
        self.value = 0

    def inc(self, amount: float = 1) -> None:
        self.value += amount


async def _announce(sessionmaker, notifier, session_id: str, seq: int, *, commit: bool) -> None:
    async with sessionmaker() as db, db.begin() as tx:
        await db.execute(text("SELECT 1"))
        await notifier.announce(db, session_id, seq)
        if not commit:
            await tx.rollback()


async def test_followers_are_woken_on_commit_only_and_per_session(database_url: str) -> None:
    engine = create_engine(database_url)
    sessionmaker = create_sessionmaker(engine)
    received = _Count()
    notifier = build_notifier(make_url(database_url), fallback_poll_s=5, local_poll_s=0.5, received=received)
    assert isinstance(notifier, PostgresNotifier if database_url.startswith("postgresql") else LocalNotifier)
    await notifier.start()
    try:
        with notifier.watch("s1") as s1, notifier.watch("s2") as s2:
            await _announce(sessionmaker, notifier, "s1", 7, commit=False)
            await _announce(sessionmaker, notifier, "s1", 8, commit=True)
            await asyncio.wait_for(s1.changed.wait(), 5)
            # The rolled-back 7 never arrives: the highest seq seen is the committed one.
            assert s1.seq == 8 and s1.has_news(7) and not s1.has_news(8)
            assert not s2.changed.is_set()
            assert received.value == 1
    finally:
        await notifier.aclose()
        await engine.dispose()


async def test_the_postgres_listener_reconnects_and_wakes_every_follower(postgres_url: str) -> None:
    engine = create_engine(postgres_url)
    sessionmaker = create_sessionmaker(engine)
    notifier = build_notifier(make_url(postgres_url), fallback_poll_s=5, local_poll_s=0.5)
    await notifier.start()
    try:
        with notifier.watch("s1") as watch:
            async with engine.connect() as conn:  # the listening connection is lost, as on a server restart
                await conn.execute(text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE pid <> pg_backend_pid() AND datname = current_database() AND query LIKE 'LISTEN%'"
                ))
            # Notifications sent while it was gone are lost: every follower is told to read.
            await asyncio.wait_for(watch.changed.wait(), 10)
            assert watch.missed and watch.has_news(10**9)
            watch.clear()
            await _announce(sessionmaker, notifier, "s1", 3, commit=True)
            await asyncio.wait_for(watch.changed.wait(), 5)
            assert watch.seq == 3 and not watch.missed
    finally:
        await notifier.aclose()
        await engine.dispose()


async def test_start_returns_once_listening_and_one_statement_wakes_every_session_of_a_batch(
    database_url: str,
) -> None:
    engine = create_engine(database_url)
    sessionmaker = create_sessionmaker(engine)
    notifier = build_notifier(make_url(database_url), fallback_poll_s=5, local_poll_s=0.5)
    started = asyncio.get_running_loop().time()
    await notifier.start()
    # Start-up waits for the LISTEN, not for its 10 s bound (once it always waited the whole bound:
    # every Agent Service start on PostgreSQL took 10 s longer).
    assert asyncio.get_running_loop().time() - started < 5
    try:
        with notifier.watch("s1") as s1, notifier.watch("s2") as s2, notifier.watch("s3") as s3:
            async with sessionmaker() as db, db.begin():
                await notifier.announce_many(db, {"s1": 4, "s2": 9})
            await asyncio.wait_for(asyncio.gather(s1.changed.wait(), s2.changed.wait()), 5)
            assert (s1.seq, s2.seq) == (4, 9) and not s3.changed.is_set()
    finally:
        await notifier.aclose()
        await engine.dispose()
