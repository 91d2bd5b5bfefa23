"""The event log: group commit (no transaction per token), terminal events written before they are
seen, and bounded live subscriptions."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import event as sa_event
from sqlalchemy.exc import OperationalError

from agent_service.events.event_log import EventLog, EventsNotSaved, LiveEvent, LiveSubscription
from agent_service.metrics import AgentMetrics
from agent_service.migrate import run_migrations
from agent_service.models import AgentRun, AgentSession
from agent_service.repository import EventRepository, RunEnd, SessionRepository
from shared.db import create_engine, create_sessionmaker
from shared.fastpath.handoff import Handoff
from shared.protocol import (
    AnswerChunkData,
    CompleteData,
    ErrorCode,
    ErrorData,
    EventEnvelope,
    EventType,
    ToolEndData,
    utcnow,
)


async def _setup(database_url: str, seq_reserved: int = 0):
    engine = create_engine(database_url)
    await run_migrations(engine)
    sessionmaker = create_sessionmaker(engine)
    now = utcnow()
    async with sessionmaker.begin() as db:
        db.add(AgentSession(id="s1", profile_name="default", status="ACTIVE", user_context={"user_id": "u"},
                            transcript=[], last_seq=0, seq_reserved=seq_reserved, current_run_id="r1",
                            created_at=now, updated_at=now))
        await db.flush()  # the session's row before its run's
        db.add(_run(now))
    return engine, sessionmaker


OWNER = "this-process"


def _run(now) -> AgentRun:
    """r1 of s1, executed by this process (its end is written only while it still holds it)."""
    return AgentRun(id="r1", session_id="s1", status="ACTIVE", first_seq=1, started_at=now, owner_id=OWNER)


def _end(status: str = "COMPLETED") -> RunEnd:
    return RunEnd("r1", OWNER, status, utcnow())


class _Shown:
    """A live reader that keeps up: the seqs it was shown, in order."""

    def __init__(self, log: EventLog) -> None:
        sub, _, _ = log.subscribe("s1")
        assert sub is not None
        self.seqs: list[int] = []
        self.types: list[tuple[EventType, str | None]] = []
        self.handoff = Handoff(self._take, maxsize=1000)
        sub.attach(self.handoff)

    async def _take(self, batch: list[LiveEvent]) -> None:
        self.seqs.extend(item.envelope.seq for item in batch)
        self.types.extend((item.envelope.type, item.envelope.data.get("code")) for item in batch)


async def _reserved(sessionmaker) -> tuple[int, int]:
    async with sessionmaker() as db:
        session = await SessionRepository(db).get("s1")
        return session.seq_reserved, session.last_seq


async def test_no_event_is_shown_past_the_durable_reservation(database_url: str) -> None:
    engine, sessionmaker = await _setup(database_url, seq_reserved=4)
    log = EventLog(sessionmaker, group_commit_ms=50, live_queue_size=1000, metrics=AgentMetrics(), seq_block=4)
    log.start()
    try:
        channel = log.open_channel("s1", "r1", 1, reserved=4)
        shown = _Shown(log)
        # Six events with no await between them: the extension asked for at seq 2 has not committed.
        for i in range(6):
            log.emit(channel, EventType.ANSWER_CHUNK, AnswerChunkData(text=f"t{i}"))
        await shown.handoff.wait_idle()
        assert shown.seqs == [1, 2, 3, 4]
        assert [item.envelope.seq for item in channel.held] == [5, 6]
        assert channel.last_seq == 4  # what the session's status reports
        # Once the extension is durable (2 + a block of 4), the held events are shown, in order.
        assert channel.extending is not None
        await channel.extending
        await shown.handoff.wait_idle()
        assert shown.seqs == [1, 2, 3, 4, 5, 6] and channel.held == []
        assert (await _reserved(sessionmaker))[0] == 6

        final = await log.emit_final(
            channel, EventType.COMPLETE, CompleteData(answer="done"), _end(), {"status": "COMPLETED"})
        await shown.handoff.wait_idle()
        assert final.seq == 7 and shown.seqs[-1] == 7
        # The run's end gives back what it reserved and did not use.
        assert await _reserved(sessionmaker) == (7, 7)
    finally:
        await log.aclose()
        await engine.dispose()


async def test_a_run_that_lost_its_session_shows_nothing_past_its_reservation(database_url: str) -> None:
    engine, sessionmaker = await _setup(database_url, seq_reserved=4)
    log = EventLog(sessionmaker, group_commit_ms=50, live_queue_size=1000, metrics=AgentMetrics(), seq_block=4)
    log.start()
    try:
        channel = log.open_channel("s1", "r1", 1, reserved=4)
        shown = _Shown(log)
        # Another replica ended the run (its owner looked dead): its ERROR took seq 5.
        async with sessionmaker.begin() as db:
            await SessionRepository(db).update("s1", status="FAILED", last_seq=5, seq_reserved=5)
        for i in range(6):
            log.emit(channel, EventType.ANSWER_CHUNK, AnswerChunkData(text=f"t{i}"))
        assert channel.extending is not None
        await channel.extending
        await shown.handoff.wait_idle()
        assert shown.seqs == [1, 2, 3, 4]
        assert [item.envelope.seq for item in channel.held] == [5, 6]
        assert await _reserved(sessionmaker) == (5, 5)
    finally:
        log.abandon(channel)
        await log.aclose()
        await engine.dispose()


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

        async def watch(batch: list[LiveEvent]) -> None:
            if batch[-1].envelope.type is EventType.COMPLETE:
                async with sessionmaker() as db:
                    rows = await EventRepository(db).after("s1", 200, 10)
                    seen_in_db_before_publish.extend(e.seq for e in rows)

        watcher = Handoff(watch, maxsize=1000)
        sub.attach(watcher)
        final = await log.emit_final(
            channel, EventType.COMPLETE, CompleteData(answer="done"), _end(), {"status": "COMPLETED"})
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


@pytest.mark.parametrize(("events", "shown_before_end", "shows_end"), [(2, [1, 2], True), (5, [1, 2, 3, 4], False)])
async def test_a_terminal_event_that_could_not_be_written_is_shown_only_when_its_seq_is_reserved(
    tmp_path: Path, events: int, shown_before_end: list[int], shows_end: bool,
) -> None:
    # The database is gone: no group commit, no extension of the reservation (it stays at 4), no end.
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path}/no/such/dir/agent.db")
    log = EventLog(create_sessionmaker(engine), group_commit_ms=50, live_queue_size=1000, metrics=AgentMetrics(),
                   seq_block=4, durable_write_budget_s=0.3)

    try:
        channel = log.open_channel("s1", "r1", 1, reserved=4)
        shown = _Shown(log)
        for i in range(events):
            log.emit(channel, EventType.ANSWER_CHUNK, AnswerChunkData(text=f"t{i}"))
        # Its events were given up after the budget: a COMPLETE is refused, an ERROR is tried.
        with pytest.raises(EventsNotSaved):
            await log.emit_final(channel, EventType.COMPLETE, CompleteData(answer="done"), _end())
        assert channel.lost
        error = ErrorData(code=ErrorCode.STORAGE_UNAVAILABLE.value, message="events lost", retryable=True)
        with pytest.raises(OperationalError):
            await log.emit_final(channel, EventType.ERROR, error, _end("FAILED"))
        await shown.handoff.wait_idle()
        # Recovery will end the run at seq_reserved + 1 = 5: an end shown at 6 would be a seq that
        # later names another event, so that reader is cut off instead (it resumes from the log).
        assert shown.seqs == shown_before_end + ([events + 1] if shows_end else [])
        if shows_end:  # what it says is that the end was not saved, whatever the run meant to say
            assert shown.types[-1] == (EventType.ERROR, ErrorCode.STORAGE_UNAVAILABLE.value)
        assert log.channel("s1") is None
    finally:
        log.writer.discard("s1")  # nothing to write on the way out either
        await log.aclose()
        await engine.dispose()


async def test_events_held_back_by_a_database_restart_are_written_in_order_before_the_end(
    database_url: str,
) -> None:
    engine, sessionmaker = await _setup(database_url)
    log = EventLog(sessionmaker, group_commit_ms=10, live_queue_size=1000, metrics=AgentMetrics(), seq_block=1000,
                   durable_write_budget_s=30)
    log.start()
    writes = {"fail": 3}

    @sa_event.listens_for(engine.sync_engine, "before_cursor_execute")
    def _away(_conn, _cursor, statement, *_args) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO AGENT_EVENTS") and writes["fail"]:
            writes["fail"] -= 1
            raise OperationalError(statement, {}, ConnectionError("the server restarted"))

    try:
        channel = log.open_channel("s1", "r1", 1, reserved=1000)
        for i in range(20):
            log.emit(channel, EventType.ANSWER_CHUNK, AnswerChunkData(text=f"t{i}"))
        await log.emit_final(channel, EventType.COMPLETE, CompleteData(answer="done"), _end())
        async with sessionmaker() as db:
            stored = await EventRepository(db).after("s1", 0, 100)
        assert [e.seq for e in stored] == list(range(1, 22)) and writes["fail"] == 0
        assert stored[-1].type is EventType.COMPLETE
    finally:
        sa_event.remove(engine.sync_engine, "before_cursor_execute", _away)
        await log.aclose()
        await engine.dispose()


async def test_one_group_commit_moves_the_last_seq_of_every_session_in_it(database_url: str) -> None:
    engine, sessionmaker = await _setup(database_url)
    now = utcnow()
    async with sessionmaker.begin() as db:
        for sid in ("s2", "s3"):
            db.add(AgentSession(id=sid, profile_name="default", status="ACTIVE", user_context={"user_id": "u"},
                                transcript=[], last_seq=0, seq_reserved=0, current_run_id=f"r-{sid}",
                                created_at=now, updated_at=now))
    statements: list[tuple[str, bool]] = []
    sa_event.listen(engine.sync_engine, "before_cursor_execute",
                    lambda _c, _cur, stmt, _p, _ctx, many: statements.append((stmt, many)))
    log = EventLog(sessionmaker, group_commit_ms=10_000, live_queue_size=10, metrics=AgentMetrics())
    log.start()
    try:
        channels = [log.open_channel(sid, f"r-{sid}", 1, reserved=1000) for sid in ("s2", "s3")]
        for _ in range(3):
            log.emit(channels[0], EventType.ANSWER_CHUNK, AnswerChunkData(text="x"))
        log.emit(channels[1], EventType.ANSWER_CHUNK, AnswerChunkData(text="y"))
        async with sessionmaker.begin() as db:  # s3 is ahead already: a batch never moves it back
            await SessionRepository(db).update("s3", last_seq=7)
        await log.writer.flush()
        async with sessionmaker() as db:
            sessions = SessionRepository(db)
            assert [(await sessions.get(sid)).last_seq for sid in ("s1", "s2", "s3")] == [0, 3, 7]
        # Both sessions' last_seq in one statement (SQLite: run as executemany).
        bumps = [many for stmt, many in statements if stmt.lstrip().upper().startswith("UPDATE AGENT_SESSIONS")
                 and "last_seq <" in stmt]
        assert bumps == [database_url.startswith("sqlite")]
    finally:
        await log.aclose()
        await engine.dispose()


async def test_a_checkpoint_is_written_with_the_events_before_it_never_ahead_of_them(database_url: str) -> None:
    """A run's checkpoint goes through the group commit behind its events: a batch that fails takes
    both back (a recovery would otherwise find a state ahead of the log), and the retry writes both in
    one transaction; the checkpoints of several steps in one batch are one statement, the last one stays."""
    engine, sessionmaker = await _setup(database_url)
    log = EventLog(sessionmaker, group_commit_ms=10_000, live_queue_size=10, metrics=AgentMetrics(),
                   durable_write_budget_s=30)
    log.writer.owner_id = OWNER
    log.start()
    failures = {"left": 1}
    checkpoint_statements: list[bool] = []

    def _watch(_conn, _cursor, statement, _params, _context, many) -> None:
        upper = statement.lstrip().upper()
        if upper.startswith("UPDATE AGENT_RUNS SET CHECKPOINT"):
            checkpoint_statements.append(many)
            if failures["left"]:  # the database goes away after the events' insert, before the commit
                failures["left"] -= 1
                raise OperationalError(statement, {}, ConnectionError("the server restarted"))

    sa_event.listen(engine.sync_engine, "before_cursor_execute", _watch)
    try:
        channel = log.open_channel("s1", "r1", 1, reserved=1000)
        log.emit(channel, EventType.ANSWER_CHUNK, AnswerChunkData(text="step one"))
        log.checkpoint(channel, {"seq": 1, "steps": 1})
        log.emit(channel, EventType.TOOL_END, ToolEndData(call_id="c1", ok=True, result=1, duration_ms=1.0))
        log.checkpoint(channel, {"seq": 2, "steps": 2})
        await log.writer.flush()
        async with sessionmaker() as db:
            stored = await EventRepository(db).after("s1", 0, 10)
            run = await db.get(AgentRun, "r1")
        assert [e.seq for e in stored] == [1, 2] and run.checkpoint == {"seq": 2, "steps": 2}
        # The first try failed as a whole (no checkpoint without its events); the retry wrote both,
        # the batch's two checkpoints as one statement.
        assert failures["left"] == 0 and len(checkpoint_statements) == 2
    finally:
        sa_event.remove(engine.sync_engine, "before_cursor_execute", _watch)
        await log.aclose()
        await engine.dispose()
