"""The event log: group commit (no transaction per token), terminal events written before they are
seen, and bounded live subscriptions."""

from __future__ import annotations

import asyncio

from sqlalchemy import event as sa_event

from agent_service.metrics import AgentMetrics
from agent_service.migrate import run_migrations
from agent_service.models import AgentSession
from agent_service.runs.event_log import EventLog, LiveEvent, LiveSubscription
from agent_service.runs.repository import EventRepository, SessionRepository
from shared.db import create_engine, create_sessionmaker
from shared.fastpath.handoff import Handoff
from shared.protocol import AnswerChunkData, CompleteData, EventEnvelope, EventType, utcnow


async def _setup(database_url: str):
    engine = create_engine(database_url)
    await run_migrations(engine)
    sessionmaker = create_sessionmaker(engine)
    now = utcnow()
    async with sessionmaker.begin() as db:
        db.add(AgentSession(id="s1", profile_name="default", status="ACTIVE", user_context={"user_id": "u"},
                            transcript=[], last_seq=0, current_run_id="r1", created_at=now, updated_at=now))
    return engine, sessionmaker


async def test_tokens_are_group_committed_and_terminal_written_first(database_url: str) -> None:
    engine, sessionmaker = await _setup(database_url)
    commits = 0

    def count_commit(_conn) -> None:
        nonlocal commits
        commits += 1

    sa_event.listen(engine.sync_engine, "commit", count_commit)
    metrics = AgentMetrics()
    log = EventLog(sessionmaker, group_commit_ms=50, live_queue_size=1000, metrics=metrics)
    log.start()
    try:
        channel = log.open_channel("s1", "r1", 1, reserved=1000)
        sub, run_id, snapshot = log.subscribe("s1")
        assert sub is not None and run_id == "r1" and snapshot == []
        for i in range(200):
            log.emit(channel, EventType.ANSWER_CHUNK, AnswerChunkData(text=f"t{i} "))
            if i % 50 == 0:
                await asyncio.sleep(0)  # let the writer run now and then, as a streaming run does
        # What a replay sees: the snapshot of unwritten events, then the log read afterwards,
        # together hold every event.
        _, _, snap = log.subscribe("s1")
        async with sessionmaker() as db:
            persisted = {e.seq for e in await EventRepository(db).after("s1", 0, 1000)}
        assert persisted | {item.envelope.seq for item in snap} == set(range(1, 201))

        seen_in_db_before_publish: list[int] = []

        async def finalize(db) -> None:
            await SessionRepository(db).update("s1", status="COMPLETED")

        async def watch(batch: list[LiveEvent]) -> None:
            if batch[-1].envelope.type is EventType.COMPLETE:
                async with sessionmaker() as db:
                    rows = await EventRepository(db).after("s1", 200, 10)
                    seen_in_db_before_publish.extend(e.seq for e in rows)

        watcher = Handoff(watch, maxsize=1000)
        sub.attach(watcher)
        final = await log.emit_final(channel, EventType.COMPLETE, CompleteData(answer="done"), finalize)
        await watcher.wait_idle()
        assert final.seq == 201
        assert seen_in_db_before_publish == [201]
        assert sub.closed and log.channel("s1") is None

        async with sessionmaker() as db:
            rows = await EventRepository(db).after("s1", 0, 1000)
            session = await SessionRepository(db).get("s1")
        assert [e.seq for e in rows] == list(range(1, 202))
        assert session.status == "COMPLETED" and session.last_seq == 201
        # 201 events in a handful of transactions, not one per token.
        assert commits < 20, commits
    finally:
        await log.aclose()
        await engine.dispose()


async def test_writer_flushes_on_its_interval_without_a_boundary(database_url: str) -> None:
    engine, sessionmaker = await _setup(database_url)
    log = EventLog(sessionmaker, group_commit_ms=10, live_queue_size=10, metrics=AgentMetrics())
    log.start()
    try:
        channel = log.open_channel("s1", "r1", 1, reserved=1000)
        log.emit(channel, EventType.ANSWER_CHUNK, AnswerChunkData(text="x"))
        await log.writer.flush()
        assert channel.unflushed == {}
        async with sessionmaker() as db:
            assert [e.seq for e in await EventRepository(db).after("s1", 0, 10)] == [1]
            assert (await SessionRepository(db).get("s1")).last_seq == 1
    finally:
        await log.aclose()
        await engine.dispose()


def _item(seq: int) -> LiveEvent:
    env = EventEnvelope(session_id="s", run_id="r", seq=seq, type=EventType.ANSWER_CHUNK, ts=utcnow(), data={"text": ""})
    return LiveEvent(env, b"")


async def test_a_subscriber_that_falls_behind_is_cut_off() -> None:
    sub = LiveSubscription(maxsize=3)
    assert all(sub.push(_item(i)) for i in range(1, 4))
    assert not sub.push(_item(4))
    assert sub.overflowed and sub.changed.is_set()


async def test_events_buffered_before_attach_go_to_the_sink_first_then_each_new_one() -> None:
    sub = LiveSubscription(maxsize=3)
    got: list[int] = []

    async def consume(batch: list[LiveEvent]) -> None:
        got.extend(item.envelope.seq for item in batch)

    sub.push(_item(1))
    sub.push(_item(2))
    sub.attach(Handoff(consume, maxsize=3))
    assert got == [1, 2]
    assert sub.push(_item(3)) and got == [1, 2, 3]
    sub.close()
    assert sub.closed and sub.changed.is_set() and not sub.push(_item(4))


async def test_a_sink_that_refuses_an_event_cuts_the_subscriber_off() -> None:
    sub = LiveSubscription(maxsize=3)
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def consume(_batch: list[LiveEvent]) -> None:
        await gate  # a client that stopped reading

    sink = Handoff(consume, maxsize=1)
    sub.attach(sink)
    assert sub.push(_item(1)) and sub.push(_item(2))
    assert not sub.push(_item(3))
    assert sub.overflowed
    sink.close()
