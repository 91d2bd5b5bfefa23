"""The SSE stream of a live run: the log is read only when the run's unwritten events do not hold
everything the reader asks for, and either way every event arrives once, in order."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

from sqlalchemy import event as sa_event

from agent_service.events import streaming
from agent_service.events.event_log import EventLog
from agent_service.events.streaming import EventStreamer, StreamSettings
from agent_service.metrics import AgentMetrics
from agent_service.migrate import run_migrations
from agent_service.models import AgentRun, AgentSession
from agent_service.repository import RunEnd
from shared.db import create_engine, create_sessionmaker
from shared.protocol import AnswerChunkData, CompleteData, EventType, utcnow
from shared.sse import SSEDecoder, decode_envelope

SETTINGS = StreamSettings(heartbeat_seconds=5, retry_ms=1000)


async def _setup(database_url: str):
    engine = create_engine(database_url)
    await run_migrations(engine)
    sessionmaker = create_sessionmaker(engine)
    now = utcnow()
    async with sessionmaker.begin() as db:
        db.add(AgentSession(id="s1", profile_name="default", status="ACTIVE", user_context={"user_id": "u"},
                            transcript=[], last_seq=0, current_run_id="r1", created_at=now, updated_at=now))
        await db.flush()  # the session's row before its run's
        db.add(AgentRun(id="r1", session_id="s1", status="ACTIVE", first_seq=1, started_at=now, owner_id=OWNER))
    log_reads: list[str] = []

    def record(_conn, _cursor, statement: str, *_args) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "agent_events" in statement:
            log_reads.append(statement)

    sa_event.listen(engine.sync_engine, "before_cursor_execute", record)
    return engine, sessionmaker, log_reads


@asynccontextmanager
async def _running_log(database_url: str, *, live_queue_size: int):
    """A migrated database with session s1, and a started event log whose group commit never
    fires on its own (a window no test reaches): events stay unwritten until a terminal event."""
    engine, sessionmaker, log_reads = await _setup(database_url)
    metrics = AgentMetrics()
    log = EventLog(sessionmaker, group_commit_ms=60_000, live_queue_size=live_queue_size, metrics=metrics)
    log.start()
    try:
        yield sessionmaker, log, log_reads, metrics
    finally:
        await log.aclose()
        await engine.dispose()


OWNER = "this-process"


def _end() -> RunEnd:
    """The end of r1, executed by this process, leaving its session COMPLETED."""
    return RunEnd("r1", OWNER, "COMPLETED", utcnow())


class _Client:
    """What the SSE response hands ``serve``: a write that decodes what it is given."""

    def __init__(self) -> None:
        self.decoder = SSEDecoder()
        self.seqs: list[int] = []

    async def write(self, data: bytes) -> None:
        self.seqs.extend(decode_envelope(e).seq for e in self.decoder.feed(data))


async def _read_all(streamer: EventStreamer, *args, **kwargs) -> list[int]:
    client = _Client()
    await streamer.serve(client.write, *args, **kwargs)
    return client.seqs


async def test_live_run_covered_by_unwritten_events_is_streamed_without_reading_the_log(database_url: str) -> None:
    async with _running_log(database_url, live_queue_size=1000) as (sessionmaker, log, log_reads, metrics):
        channel = log.open_channel("s1", "r1", 1, reserved=1000)
        for i in range(5):
            log.emit(channel, EventType.ANSWER_CHUNK, AnswerChunkData(text=f"t{i}"))
        streamer = EventStreamer(log, sessionmaker, SETTINGS, metrics)
        reader = asyncio.create_task(_read_all(streamer, "s1", 0, until_run="r1"))
        while not channel.subscribers:  # the reader has subscribed: the rest reaches it live
            await asyncio.sleep(0)
        for i in range(5, 10):
            log.emit(channel, EventType.ANSWER_CHUNK, AnswerChunkData(text=f"t{i}"))
            await asyncio.sleep(0)
        await log.emit_final(channel, EventType.COMPLETE, CompleteData(answer="done"), _end(), {"status": "COMPLETED"})
        seqs = await asyncio.wait_for(reader, 10)
    assert seqs == list(range(1, 12))
    assert log_reads == []
    # Ten deltas observed, the terminal event not.
    overhead = metrics.registry.get_sample_value("agent_event_overhead_seconds_count")
    assert overhead == 10


async def test_events_already_written_are_read_from_the_log_then_the_rest_from_memory(database_url: str) -> None:
    async with _running_log(database_url, live_queue_size=1000) as (sessionmaker, log, log_reads, _metrics):
        channel = log.open_channel("s1", "r1", 1, reserved=1000)
        for i in range(4):
            log.emit(channel, EventType.ANSWER_CHUNK, AnswerChunkData(text=f"t{i}"))
        await log.writer.flush()  # 1..4 in the log
        for i in range(4, 7):
            log.emit(channel, EventType.ANSWER_CHUNK, AnswerChunkData(text=f"t{i}"))  # 5..7 in memory only
        streamer = EventStreamer(log, sessionmaker, SETTINGS)
        reader = asyncio.create_task(_read_all(streamer, "s1", 2, until_run="r1"))
        while not channel.subscribers:
            await asyncio.sleep(0)
        await log.emit_final(channel, EventType.COMPLETE, CompleteData(answer="done"), _end(), {"status": "COMPLETED"})
        seqs = await asyncio.wait_for(reader, 10)
    assert seqs == [3, 4, 5, 6, 7, 8]
    assert log_reads, "events 3 and 4 exist only in the log"


async def test_stream_subscribed_before_the_run_sends_everything_from_memory_even_once_written(
    database_url: str,
) -> None:
    """An execute's own subscription, taken before the run emitted anything, holds every event:
    its stream sends them all without reading the log, even when they were committed before the
    response started."""
    async with _running_log(database_url, live_queue_size=1000) as (sessionmaker, log, log_reads, metrics):
        channel = log.open_channel("s1", "r1", 1, reserved=1000)
        live, _, _ = log.subscribe("s1")
        for i in range(4):
            log.emit(channel, EventType.ANSWER_CHUNK, AnswerChunkData(text=f"t{i}"))
        await log.writer.flush()  # 1..4 committed: a late subscriber would have to read them back
        streamer = EventStreamer(log, sessionmaker, SETTINGS, metrics)
        reader = asyncio.create_task(_read_all(streamer, "s1", 0, until_run="r1", live=live))
        for i in range(4, 7):
            log.emit(channel, EventType.ANSWER_CHUNK, AnswerChunkData(text=f"t{i}"))
            await asyncio.sleep(0)
        await log.emit_final(channel, EventType.COMPLETE, CompleteData(answer="done"), _end(), {"status": "COMPLETED"})
        seqs = await asyncio.wait_for(reader, 10)
    assert seqs == list(range(1, 9))
    assert log_reads == []
    assert metrics.registry.get_sample_value("agent_event_overhead_seconds_count") == 7
    assert not channel.subscribers


async def test_stream_whose_early_subscription_overflowed_replays_from_the_log(database_url: str) -> None:
    async with _running_log(database_url, live_queue_size=3) as (sessionmaker, log, log_reads, _metrics):
        channel = log.open_channel("s1", "r1", 1, reserved=1000)
        live, _, _ = log.subscribe("s1")
        for i in range(5):  # more than the subscription holds: it is cut off
            log.emit(channel, EventType.ANSWER_CHUNK, AnswerChunkData(text=f"t{i}"))
        await log.writer.flush()
        assert live.overflowed
        streamer = EventStreamer(log, sessionmaker, SETTINGS)
        reader = asyncio.create_task(_read_all(streamer, "s1", 0, until_run="r1", live=live))
        while not channel.subscribers:
            await asyncio.sleep(0)
        await log.emit_final(channel, EventType.COMPLETE, CompleteData(answer="done"), _end(), {"status": "COMPLETED"})
        seqs = await asyncio.wait_for(reader, 10)
    assert seqs == list(range(1, 7))
    assert log_reads, "events 1..5 were read back from the log"


async def test_a_live_event_is_written_to_an_idle_reader_inside_emit(database_url: str) -> None:
    """The run writes the event to a reader that keeps up itself: no writer task to wait for."""
    async with _running_log(database_url, live_queue_size=1000) as (sessionmaker, log, _, metrics):
        channel = log.open_channel("s1", "r1", 1, reserved=1000)
        client = _Client()
        streamer = EventStreamer(log, sessionmaker, SETTINGS, metrics)
        reader = asyncio.create_task(streamer.serve(client.write, "s1", 0, until_run="r1"))
        while not channel.subscribers:
            await asyncio.sleep(0)
        await asyncio.sleep(0)  # the reader attaches to its subscription
        for i in range(1, 4):
            log.emit(channel, EventType.ANSWER_CHUNK, AnswerChunkData(text=f"t{i}"))
            assert client.seqs[-1] == i  # written before emit returned
        await log.emit_final(channel, EventType.COMPLETE, CompleteData(answer="done"), _end(), {"status": "COMPLETED"})
        await asyncio.wait_for(reader, 10)
    assert client.seqs == [1, 2, 3, 4]


async def test_a_reader_whose_writes_block_delays_neither_the_run_nor_another_reader(database_url: str) -> None:
    async with _running_log(database_url, live_queue_size=3) as (sessionmaker, log, _, _metrics):
        channel = log.open_channel("s1", "r1", 1, reserved=1000)
        stuck_gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        stuck_writes: list[bytes] = []

        async def stuck_write(data: bytes) -> None:
            stuck_writes.append(data)
            if len(stuck_writes) > 1:  # the retry field goes out; then the socket buffer is full
                await stuck_gate

        fast = _Client()
        streamer = EventStreamer(log, sessionmaker, SETTINGS)
        stuck_reader = asyncio.create_task(streamer.serve(stuck_write, "s1", 0, until_run="r1"))
        fast_reader = asyncio.create_task(streamer.serve(fast.write, "s1", 0, until_run="r1"))
        while len(channel.subscribers) < 2:
            await asyncio.sleep(0)
        await asyncio.sleep(0)
        for i in range(1, 7):
            log.emit(channel, EventType.ANSWER_CHUNK, AnswerChunkData(text=f"t{i}"))
            assert fast.seqs[-1] == i
        # The stuck reader took event 1 into its blocked write and queued 3 more; the 5th cut it off.
        await asyncio.wait_for(stuck_reader, 10)
        assert len(channel.subscribers) == 1
        await log.emit_final(channel, EventType.COMPLETE, CompleteData(answer="done"), _end(), {"status": "COMPLETED"})
        await asyncio.wait_for(fast_reader, 10)
    assert fast.seqs == list(range(1, 8))
    assert len(stuck_writes) == 2


async def test_a_disconnect_ends_the_stream_and_its_subscription(database_url: str) -> None:
    async with _running_log(database_url, live_queue_size=10) as (sessionmaker, log, _, _metrics):
        channel = log.open_channel("s1", "r1", 1, reserved=1000)
        client = _Client()
        disconnected = asyncio.Event()
        streamer = EventStreamer(log, sessionmaker, SETTINGS)
        reader = asyncio.create_task(
            streamer.serve(client.write, "s1", 0, until_run="r1", disconnected=disconnected)
        )
        while not channel.subscribers:
            await asyncio.sleep(0)
        log.emit(channel, EventType.ANSWER_CHUNK, AnswerChunkData(text="t1"))
        disconnected.set()
        await asyncio.wait_for(reader, 10)
        assert not channel.subscribers
        log.emit(channel, EventType.ANSWER_CHUNK, AnswerChunkData(text="t2"))
        await log.emit_final(channel, EventType.COMPLETE, CompleteData(answer="done"), _end(), {"status": "COMPLETED"})
    assert client.seqs == [1]


async def test_a_live_stream_ends_once_the_service_starts_stopping(database_url: str) -> None:
    """A graceful stop ends the stream while its run still goes on: the client resumes elsewhere."""
    async with _running_log(database_url, live_queue_size=1000) as (sessionmaker, log, _log_reads, _metrics):
        channel = log.open_channel("s1", "r1", 1, reserved=1000)
        stopping = asyncio.Event()
        streamer = EventStreamer(log, sessionmaker, SETTINGS, stopping=stopping)
        reader = asyncio.create_task(_read_all(streamer, "s1", 0, until_run="r1"))
        while not channel.subscribers:
            await asyncio.sleep(0)
        log.emit(channel, EventType.ANSWER_CHUNK, AnswerChunkData(text="t0"))
        stopping.set()
        seqs = await asyncio.wait_for(reader, 10)
        assert seqs == [1]
        assert not channel.subscribers
        await log.emit_final(channel, EventType.COMPLETE, CompleteData(answer="done"), _end(), {"status": "COMPLETED"})


async def test_a_stream_following_another_replicas_run_ends_once_the_service_starts_stopping(
    database_url: str,
) -> None:
    async with _running_log(database_url, live_queue_size=1000) as (sessionmaker, log, log_reads, _metrics):
        stopping = asyncio.Event()
        streamer = EventStreamer(log, sessionmaker, SETTINGS, stopping=stopping)
        # No channel here: session s1 is ACTIVE, so the stream polls the log for another process's run.
        reader = asyncio.create_task(_read_all(streamer, "s1", 0))
        async with asyncio.timeout(10):
            while len(log_reads) < 3:  # it has polled the log several times, and still follows
                await asyncio.sleep(0.01)
        assert not reader.done()
        stopping.set()
        assert await asyncio.wait_for(reader, 10) == []


async def test_the_log_is_replayed_page_by_page_until_a_short_page_or_the_runs_terminal_event(
    database_url: str, monkeypatch,
) -> None:
    monkeypatch.setattr(streaming, "_PAGE", 2)
    async with _running_log(database_url, live_queue_size=1000) as (sessionmaker, log, log_reads, _metrics):
        channel = log.open_channel("s1", "r1", 1, reserved=1000)
        for i in range(5):
            log.emit(channel, EventType.ANSWER_CHUNK, AnswerChunkData(text=f"t{i}"))
        await log.emit_final(channel, EventType.COMPLETE, CompleteData(answer="done"), _end(), {"status": "COMPLETED"})  # 1..6 written
        streamer = EventStreamer(log, sessionmaker, SETTINGS)

        log_reads.clear()
        assert await _read_all(streamer, "s1", 1, until_run="r1") == [2, 3, 4, 5, 6]
        assert len(log_reads) == 3  # [2, 3] [4, 5] [6]: the terminal event ends it

        log_reads.clear()
        assert await _read_all(streamer, "s1", 2) == [3, 4, 5, 6]
        # No run to wait for: [3, 4] [5, 6] [] (a short page ends the replay), then the session is
        # no longer ACTIVE, so the follow reads once more ([]) and ends.
        assert len(log_reads) == 4


async def test_a_followed_run_is_read_page_by_page_until_its_terminal_event(database_url: str, monkeypatch) -> None:
    monkeypatch.setattr(streaming, "_PAGE", 2)
    async with _running_log(database_url, live_queue_size=1000) as (sessionmaker, log, log_reads, metrics):
        # Only notifications wake the follower here: no safety-net poll adds a read of its own.
        log.notifier.fallback_poll_s = 60
        # The run lives in "another process": its own event log, on the same database, announcing
        # its commits through the follower's notifier.
        other = EventLog(sessionmaker, group_commit_ms=60_000, live_queue_size=1000, metrics=metrics,
                         notifier=log.notifier)
        other.start()
        try:
            client = _Client()
            streamer = EventStreamer(log, sessionmaker, SETTINGS)
            reader = asyncio.create_task(streamer.serve(client.write, "s1", 0))
            async with asyncio.timeout(10):
                while len(log_reads) < 2:  # the replay found nothing, the follow read once and waits
                    await asyncio.sleep(0.01)
            channel = other.open_channel("s1", "r1", 1, reserved=1000)
            for i in range(5):
                other.emit(channel, EventType.ANSWER_CHUNK, AnswerChunkData(text=f"t{i}"))
            await other.writer.flush()  # 1..5 in one commit
            async with asyncio.timeout(10):
                while client.seqs[-1:] != [5]:
                    await asyncio.sleep(0.01)
            await other.emit_final(channel, EventType.COMPLETE, CompleteData(answer="done"), _end(), {"status": "COMPLETED"})
            await asyncio.wait_for(reader, 10)
        finally:
            await other.aclose()
    assert client.seqs == [1, 2, 3, 4, 5, 6]
    # [] [], then [1, 2] [3, 4] [5] (a short page: wait for the next commit), then [6]: the
    # terminal event of the session's run ends it.
    assert len(log_reads) == 6
