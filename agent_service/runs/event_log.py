"""The durable, ordered event log of runs, and the live broadcaster in front of it.

A run owns its session while it runs, so the next ``seq`` is handed out in memory. Each event is
published to the session's live subscribers at once (an SSE write never waits for the database)
and queued for the ``GroupCommitWriter``, which persists queued events in one transaction per
batch: at most every ``group_commit_ms``, sooner at an event boundary (TOOL_END, THOUGHT). A
terminal event is written in the same transaction as the session's new state, before anyone sees
it, so a client that reads ASK_USER can answer at once and a restart never loses the end of a run.

Events not yet written stay readable from ``SessionChannel.unflushed``, so a replay never misses
the last few milliseconds of events.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from agent_service.metrics import AgentMetrics
from agent_service.runs.repository import EventRepository, RunRepository, SessionRepository
from shared.fastpath.handoff import Handoff
from shared.protocol import EventEnvelope, EventType, utcnow
from shared.sse import encode_envelope

log = logging.getLogger(__name__)

_WRITE_ATTEMPTS = 3
# Events after which the group-commit writer flushes without waiting for its interval.
_BOUNDARY_EVENTS = frozenset({EventType.TOOL_END, EventType.THOUGHT})


class _RunsLost(Exception):
    def __init__(self, run_ids: set[str]) -> None:
        super().__init__(run_ids)
        self.run_ids = run_ids


class RunTakenOver(Exception):
    """Raised by a terminal write's ``finalize`` when the run is no longer this process's: its lease
    expired and another replica's recovery ended it. The transaction rolls back; nothing is retried."""


@dataclass(slots=True)
class LiveEvent:
    envelope: EventEnvelope
    # Encoded once, written to every subscriber as is.
    sse: bytes
    # perf_counter() when the run handed the event over (right as the model delta arrived); the
    # streamer measures the service's own overhead per event from it. None for terminal events,
    # whose commit is a deliberate wait, not overhead.
    created: float | None = None


class LiveSubscription:
    """One reader of a session's live events, bounded: a reader that falls ``maxsize`` events
    behind is cut off (``overflowed``) and resumes from the log with ``Last-Event-ID``.

    Until ``attach``, events wait here (the reader is still replaying the log). After it, each
    event goes straight to the reader's ``Handoff``, so a reader that is keeping up has the event
    written to its socket inside ``EventLog.emit``: no wait for a writer task to be scheduled
    behind every other run on the loop.
    """

    def __init__(self, maxsize: int) -> None:
        self._items: deque[LiveEvent] = deque()
        self.maxsize = maxsize
        self._sink: Handoff[LiveEvent] | None = None
        # Set once the subscription overflows or closes: the reader stops waiting for events.
        self.changed = asyncio.Event()
        self.overflowed = False
        self.closed = False

    def push(self, item: LiveEvent) -> bool:
        if self.overflowed or self.closed:
            return False
        if self._sink is not None:
            if self._sink.offer(item):
                return True
        elif len(self._items) < self.maxsize:
            self._items.append(item)
            return True
        self._overflow()
        return False

    def attach(self, sink: Handoff[LiveEvent]) -> None:
        """Hand every buffered event, then each new one, to ``sink`` (which refuses what it cannot
        take: its reader is stuck, or its connection failed; both cut the reader off)."""
        self._sink = sink
        items, self._items = self._items, deque()
        for item in items:
            if not sink.offer(item):
                self._overflow()
                return

    def _overflow(self) -> None:
        self.overflowed = True
        self._items.clear()
        self.changed.set()

    def close(self) -> None:
        self.closed = True
        self.changed.set()


@dataclass
class SessionChannel:
    """The live side of one session while a run of this process owns it."""

    session_id: str
    run_id: str
    next_seq: int
    subscribers: set[LiveSubscription] = field(default_factory=set)
    # Emitted but not yet committed, by seq.
    unflushed: dict[int, LiveEvent] = field(default_factory=dict)

    @property
    def last_seq(self) -> int:
        return self.next_seq - 1


class GroupCommitWriter:
    """Writes queued events in batches: one transaction per batch, never one per token."""

    def __init__(
        self, sessionmaker: async_sessionmaker, interval_s: float, metrics: AgentMetrics,
        on_written: Callable[[list[EventEnvelope]], None],
    ) -> None:
        self._sessionmaker = sessionmaker
        self._interval = interval_s
        self._metrics = metrics
        self._on_written = on_written
        self._pending: list[EventEnvelope] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._has_work = asyncio.Event()
        self._urgent = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        # Set when runs are leased (replicas sharing the database): only events of runs this
        # owner still holds are written; ``on_taken_over`` learns of the others.
        self.owner_id: str | None = None
        self.on_taken_over: Callable[[set[str]], None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="agent-event-writer")

    def add(self, envelope: EventEnvelope) -> None:
        self._pending.append(envelope)
        self._has_work.set()

    def discard(self, session_id: str) -> None:
        """Drop the queued events of ``session_id``: their seqs now belong to whoever took the
        session over, and a conflicting row would fail the whole batch, other sessions included."""
        self._pending = [env for env in self._pending if env.session_id != session_id]

    def request_flush(self) -> None:
        self._urgent.set()
        self._has_work.set()

    async def flush(self) -> None:
        """Return once everything added so far is committed (raises if it could not be)."""
        if self._task is None or self._task.done():
            # Not running (start-up or shut down): write inline.
            await self._write_batch()
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self.request_flush()
        await waiter

    async def _loop(self) -> None:
        while True:
            await self._has_work.wait()
            if not self._urgent.is_set() and not self._closing:
                try:
                    await asyncio.wait_for(self._urgent.wait(), self._interval)
                except TimeoutError:
                    pass
            self._has_work.clear()
            self._urgent.clear()
            waiters, self._waiters = self._waiters, []
            try:
                await self._write_batch()
            except Exception as exc:  # the batch is lost for the database; the waiters learn it
                log.exception("event batch could not be written")
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_exception(exc)
            else:
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)
            if self._closing and not self._pending:
                return

    async def _write_batch(self) -> None:
        batch, self._pending = self._pending, []
        attempt = 0
        while batch:
            try:
                lost = await self._write_once(batch)
            except IntegrityError as exc:
                # A seq already taken: another replica ended one of these runs (after this
                # process's lease expired) and wrote its ERROR there. Anything else is a failure.
                lost = await self._runs_not_held(batch)
                if not lost:
                    attempt = await self._failed_attempt(attempt, batch, exc)
                    continue
            except Exception as exc:  # noqa: BLE001 - retried, and re-raised after the last attempt
                attempt = await self._failed_attempt(attempt, batch, exc)
                continue
            if not lost:
                break
            # Leave those runs' events out and write the others; the runs stop without a trace.
            log.warning("events of runs another replica took over are dropped", extra={"runs": len(lost)})
            batch = [env for env in batch if env.run_id not in lost]
            if self.on_taken_over is not None:
                self.on_taken_over(lost)
        if not batch:
            return
        self._metrics.event_batches.observe(len(batch))
        self._on_written(batch)

    async def _failed_attempt(self, attempt: int, batch: list[EventEnvelope], exc: Exception) -> int:
        attempt += 1
        if attempt == _WRITE_ATTEMPTS:
            raise exc
        log.warning("event batch write failed, retrying", extra={"attempt": attempt, "events": len(batch)})
        await asyncio.sleep(0.05 * 2**attempt)  # back off before hitting the database again
        return attempt

    async def _write_once(self, batch: list[EventEnvelope]) -> set[str]:
        """Write the batch in one transaction; returns (and rolls back for) the runs of the batch
        this process no longer holds, if any."""
        last_seq: dict[str, int] = {}
        for env in batch:
            last_seq[env.session_id] = max(env.seq, last_seq.get(env.session_id, 0))
        try:
            async with self._sessionmaker.begin() as db:
                await EventRepository(db).insert_many(batch)
                sessions = SessionRepository(db)
                for session_id, seq in last_seq.items():
                    await sessions.bump_last_seq(session_id, seq)
                if self.owner_id is not None:
                    # Checked after the writes: by then this transaction holds the session rows
                    # (SQLite: the write lock), which recovery locks too before it ends a run, so
                    # a recovery either committed before (seen here) or writes after this commit.
                    run_ids = {env.run_id for env in batch}
                    lost = run_ids - await RunRepository(db).held(run_ids, self.owner_id)
                    if lost:
                        raise _RunsLost(lost)
        except _RunsLost as exc:
            return exc.run_ids
        return set()

    async def _runs_not_held(self, batch: list[EventEnvelope]) -> set[str]:
        if self.owner_id is None:
            return set()
        run_ids = {env.run_id for env in batch}
        async with self._sessionmaker() as db:
            return run_ids - await RunRepository(db).held(run_ids, self.owner_id)

    async def aclose(self) -> None:
        self._closing = True
        self._has_work.set()
        self._urgent.set()
        if self._task is not None:
            try:
                await self._task
            except Exception:
                log.exception("event writer stopped with an error")
        await self._write_batch()


class EventLog:
    def __init__(
        self, sessionmaker: async_sessionmaker, *, group_commit_ms: float, live_queue_size: int,
        metrics: AgentMetrics,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._queue_size = live_queue_size
        self._metrics = metrics
        self._channels: dict[str, SessionChannel] = {}
        self.writer = GroupCommitWriter(sessionmaker, group_commit_ms / 1000, metrics, self._written)

    def start(self) -> None:
        self.writer.start()

    def lease_to(self, owner_id: str, on_taken_over: Callable[[set[str]], None]) -> None:
        """Write only events of runs ``owner_id`` holds; report the runs it lost to ``on_taken_over``."""
        self.writer.owner_id = owner_id
        self.writer.on_taken_over = on_taken_over

    async def aclose(self) -> None:
        await self.writer.aclose()

    # --- the run side -------------------------------------------------------------------------

    def open_channel(self, session_id: str, run_id: str, next_seq: int) -> SessionChannel:
        if session_id in self._channels:
            raise RuntimeError(f"session {session_id} already has a live run")
        channel = SessionChannel(session_id=session_id, run_id=run_id, next_seq=next_seq)
        self._channels[session_id] = channel
        return channel

    def channel(self, session_id: str) -> SessionChannel | None:
        return self._channels.get(session_id)

    def _envelope(
        self, channel: SessionChannel, type_: EventType, data: BaseModel | dict[str, Any], created: float | None = None
    ) -> LiveEvent:
        payload = data.model_dump(mode="json") if isinstance(data, BaseModel) else data
        envelope = EventEnvelope(
            session_id=channel.session_id, run_id=channel.run_id, seq=channel.next_seq, type=type_, ts=utcnow(),
            data=payload,
        )
        channel.next_seq += 1
        self._metrics.events[type_].inc()
        return LiveEvent(envelope, encode_envelope(envelope), created)

    def _publish(self, channel: SessionChannel, item: LiveEvent) -> None:
        for sub in list(channel.subscribers):
            if not sub.push(item):
                channel.subscribers.discard(sub)
                if sub.overflowed:
                    self._metrics.dropped_subscribers.inc()

    def emit(self, channel: SessionChannel, type_: EventType, data: BaseModel | dict[str, Any]) -> EventEnvelope:
        """Publish a non-terminal event now; it is persisted by the next group commit."""
        item = self._envelope(channel, type_, data, time.perf_counter())
        channel.unflushed[item.envelope.seq] = item
        self._publish(channel, item)
        self.writer.add(item.envelope)
        if type_ in _BOUNDARY_EVENTS:
            self.writer.request_flush()
        return item.envelope

    async def emit_final(
        self, channel: SessionChannel, type_: EventType, data: BaseModel | dict[str, Any],
        finalize: Callable[[AsyncSession], Awaitable[None]],
    ) -> EventEnvelope:
        """Write everything before it, then the terminal event together with ``finalize``'s changes
        in one transaction; only then publish it and close the channel."""
        item = self._envelope(channel, type_, data)
        taken_over = False
        try:
            await self.writer.flush()
            for attempt in range(1, _WRITE_ATTEMPTS + 1):
                try:
                    async with self._sessionmaker.begin() as db:
                        # finalize first: it checks the run is still this process's (before the
                        # insert could collide with another replica's end of it), and it locks the
                        # run row before the session row, the order recovery locks them in.
                        await finalize(db)
                        await EventRepository(db).insert_many([item.envelope])
                        await SessionRepository(db).bump_last_seq(channel.session_id, item.envelope.seq)
                    break
                except RunTakenOver:
                    taken_over = True
                    raise
                except Exception:
                    if attempt == _WRITE_ATTEMPTS:
                        raise
                    await asyncio.sleep(0.05 * 2**attempt)  # back off before hitting the database again
        finally:
            if taken_over:
                # The log already ends this run with another process's event: publishing ours
                # would show readers an end that is not in the log.
                self.abandon(channel)
            else:
                # Even when the write failed, readers get the end of the stream; the session stays
                # ACTIVE in the database and recovery ends it once the lease expires.
                self._publish(channel, item)
                self.close_channel(channel)
        return item.envelope

    def abandon(self, channel: SessionChannel) -> None:
        """End a run's live side without a terminal event or any further write: another process
        ended the run in the log (its lease was lost). Readers are cut off and resume from the log."""
        self.writer.discard(channel.session_id)
        channel.unflushed.clear()
        self.close_channel(channel)

    def close_channel(self, channel: SessionChannel) -> None:
        if self._channels.get(channel.session_id) is channel:
            del self._channels[channel.session_id]
        for sub in channel.subscribers:
            sub.close()
        channel.subscribers.clear()

    def _written(self, batch: list[EventEnvelope]) -> None:
        for env in batch:
            channel = self._channels.get(env.session_id)
            if channel is not None:
                channel.unflushed.pop(env.seq, None)

    async def append_direct(
        self, db: AsyncSession, session_id: str, run_id: str, seq: int, type_: EventType,
        data: BaseModel | dict[str, Any],
    ) -> EventEnvelope:
        """Append one event to a session no run of this process owns (recovery, cancelling a
        paused session), inside the caller's transaction."""
        payload = data.model_dump(mode="json") if isinstance(data, BaseModel) else data
        envelope = EventEnvelope(session_id=session_id, run_id=run_id, seq=seq, type=type_, ts=utcnow(), data=payload)
        await EventRepository(db).insert_many([envelope])
        await SessionRepository(db).bump_last_seq(session_id, seq)
        self._metrics.events[type_].inc()
        return envelope

    # --- the reader side ----------------------------------------------------------------------

    def subscribe(self, session_id: str) -> tuple[LiveSubscription | None, str | None, list[LiveEvent]]:
        """Subscribe to the live run of ``session_id`` (if this process runs one).

        Returns the subscription, the live run's id and a snapshot of its not-yet-written events,
        taken together with no await in between: any event is then in the database by the time
        the caller reads it, in the snapshot, or in the subscription.
        """
        channel = self._channels.get(session_id)
        if channel is None:
            return None, None, []
        sub = LiveSubscription(self._queue_size)
        channel.subscribers.add(sub)
        return sub, channel.run_id, list(channel.unflushed.values())

    def unsubscribe(self, session_id: str, sub: LiveSubscription) -> None:
        channel = self._channels.get(session_id)
        if channel is not None:
            channel.subscribers.discard(sub)
