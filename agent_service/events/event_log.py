"""The durable, ordered event log of runs, and the live broadcaster in front of it.

A run owns its session while it runs, so the next ``seq`` is handed out in memory. Each event is
published to the session's live subscribers at once (an SSE write never waits for the database)
and queued for the ``EventWriter`` (on ``shared.group_commit.GroupCommitter``), which persists
queued events in one transaction per batch: at most every ``group_commit_ms``, sooner at an event
boundary (TOOL_END, THOUGHT). A terminal event is written in the same transaction as the session's new state, before anyone sees
it, so a client that reads ASK_USER can answer at once and a restart never loses the end of a run.

Events not yet written stay readable from ``SessionChannel.unflushed``, so a replay never misses
the last few milliseconds of events.

A durable write is never skipped: while the database is away, the group commit retries in order
(``durable_write_budget_s``), the terminal write too, and the model stream waits when too many events
queue (``room``). Events the writer had to give up mark their run's channel ``lost``: such a run
ends with ERROR STORAGE_UNAVAILABLE, never with a COMPLETE (or ASK_USER) over the hole; a terminal
event that could not be written is shown as that ERROR, not as what it would have said.

A seq is forever: an event is shown only once its seq is durably reserved for the run
(``agent_sessions.seq_reserved``, raised by the claim a block ahead and extended in the background
before the run gets there). An event past the reservation is held back (``SessionChannel.held``)
until the extension commits. Whoever ends a run it did not execute writes above the reservation,
so after a crash the log has a hole (events shown but never written), never a reused seq.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from agent_service.events.event_writer import EventWriter, RunCheckpoint
from agent_service.events.live_tail import LiveTailNotifier, LocalNotifier
from agent_service.metrics import AgentMetrics
from agent_service.repository import EventRepository, RunEnd, RunRepository, SessionRepository
from shared.fastpath.handoff import Handoff
from shared.fastpath.prevalidated import prevalidated
from shared.group_commit import RETRY_PAUSES_S
from shared.protocol import ErrorCode, ErrorData, EventEnvelope, EventType, utcnow
from shared.sse import encode_envelope
from shared.transactions import autocommit, transaction

log = logging.getLogger(__name__)

# Events after which the group-commit writer flushes without waiting for its interval.
_BOUNDARY_EVENTS = frozenset({EventType.TOOL_END, EventType.THOUGHT, EventType.RUN_RESUMED})
_live_envelope = prevalidated(EventEnvelope)
UNSAVED_END = "the run's end could not be saved: its database was unavailable for too long"


class EventsNotSaved(Exception):
    """Raised by ``emit_final`` for an end other than ERROR after some of the run's events were given
    up: nothing durable may claim completion over a hole. The caller ends the run with an ERROR."""


class RunTakenOver(Exception):
    """Raised by ``emit_final`` when the run is no longer this process's: its lease expired and
    another replica's recovery ended it. Nothing is written; nothing is retried."""


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
    # The highest seq durably reserved for this run: no event above it is shown.
    reserved: int
    subscribers: set[LiveSubscription] = field(default_factory=set)
    # Shown but not yet committed, by seq.
    unflushed: dict[int, LiveEvent] = field(default_factory=dict)
    # Emitted past the reservation: shown, in order, once the extension under way commits.
    held: list[LiveEvent] = field(default_factory=list)
    extending: asyncio.Task[None] | None = None
    # The highest seq committed by the group commit.
    written: int = 0
    # Some of its events were given up by the writer (the database stayed away too long).
    lost: bool = False

    @property
    def last_seq(self) -> int:
        """The last seq shown (held events are not: their numbers are not reserved yet)."""
        return self.next_seq - 1 - len(self.held)


class EventLog:
    def __init__(
        self, sessionmaker: async_sessionmaker, *, group_commit_ms: float, live_queue_size: int,
        metrics: AgentMetrics, seq_block: int = 1000, notifier: LiveTailNotifier | None = None,
        durable_write_budget_s: float = 30.0, max_pending: int = 50_000,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._queue_size = live_queue_size
        self.seq_block = seq_block
        self._extensions: set[asyncio.Task[None]] = set()
        self._metrics = metrics
        self._channels: dict[str, SessionChannel] = {}
        self._budget_s = durable_write_budget_s
        self.writer = EventWriter(
            sessionmaker, group_commit_ms / 1000, metrics, self._written, retry_for_s=durable_write_budget_s,
            on_given_up=self._given_up, max_pending=max_pending,
        )
        # Followers in other processes learn of every commit that adds events (``live_tail``).
        self.notifier = self.writer.notifier = notifier or LocalNotifier(fallback_poll_s=0.5)

    def start(self) -> None:
        self.writer.start()

    def lease_to(self, owner_id: str, on_taken_over: Callable[[set[str]], None]) -> None:
        """Write only events of runs ``owner_id`` holds; report the runs it lost to ``on_taken_over``."""
        self.writer.owner_id = owner_id
        self.writer.on_taken_over = on_taken_over

    async def aclose(self) -> None:
        if self._extensions:
            await asyncio.gather(*self._extensions, return_exceptions=True)
        await self.writer.aclose()

    # --- the run side -------------------------------------------------------------------------

    def open_channel(self, session_id: str, run_id: str, next_seq: int, *, reserved: int) -> SessionChannel:
        """``reserved``: the session's ``seq_reserved`` as the run's claim committed it."""
        if session_id in self._channels:
            raise RuntimeError(f"session {session_id} already has a live run")
        channel = SessionChannel(session_id=session_id, run_id=run_id, next_seq=next_seq, reserved=reserved)
        self._channels[session_id] = channel
        return channel

    def channel(self, session_id: str) -> SessionChannel | None:
        return self._channels.get(session_id)

    def _envelope(
        self, channel: SessionChannel, type_: EventType, data: BaseModel | dict[str, Any], created: float | None = None
    ) -> LiveEvent:
        payload = data.model_dump(mode="json") if isinstance(data, BaseModel) else data
        # Typed already (the channel's ids and seq, the EventType, an aware ts, the dumped payload):
        # built without validating them again, once per live event.
        envelope = _live_envelope(channel.session_id, channel.run_id, channel.next_seq, type_, utcnow(), payload)
        channel.next_seq += 1
        self._metrics.events.inc(type_)
        return LiveEvent(envelope, encode_envelope(envelope), created)

    def _publish(self, channel: SessionChannel, item: LiveEvent) -> None:
        for sub in list(channel.subscribers):
            if not sub.push(item):
                channel.subscribers.discard(sub)
                if sub.overflowed:
                    self._metrics.dropped_subscribers.inc()

    def emit(self, channel: SessionChannel, type_: EventType, data: BaseModel | dict[str, Any]) -> EventEnvelope:
        """Publish a non-terminal event now (once its seq is reserved); it is persisted by the next
        group commit."""
        item = self._envelope(channel, type_, data, time.perf_counter())
        self.writer.add(item.envelope)
        if type_ in _BOUNDARY_EVENTS:
            self.writer.request_flush()
        if item.envelope.seq <= channel.reserved:
            channel.unflushed[item.envelope.seq] = item
            self._publish(channel, item)
        else:
            channel.held.append(item)
        if channel.next_seq > channel.reserved - self.seq_block // 2 and channel.extending is None:
            # Half the block used: reserve the next one now, so that no event ever waits for it.
            channel.extending = asyncio.create_task(
                self._extend(channel, channel.next_seq - 1 + self.seq_block), name="agent-seq-reserve"
            )
            self._extensions.add(channel.extending)
            channel.extending.add_done_callback(self._extensions.discard)
        return item.envelope

    def checkpoint(self, channel: SessionChannel, state: dict[str, Any]) -> None:
        """Store ``state`` on the run's row with the events emitted so far: written in the group
        commit of the last of them or a later one (``EventWriter``), never ahead of any."""
        self.writer.add_checkpoint(RunCheckpoint(channel.session_id, channel.run_id, state))

    async def _extend(self, channel: SessionChannel, reserved: int) -> None:
        try:
            async with transaction(self._sessionmaker) as db:
                extended = await SessionRepository(db).extend_reservation(channel.session_id, channel.run_id, reserved)
        except Exception:  # the next emit tries again; held events wait for it
            log.exception("seq reservation could not be extended", extra={"run_id": channel.run_id})
            return
        finally:
            channel.extending = None
        if not extended:
            # The run ended meanwhile (its end shows what it held) or was taken over (its events
            # are not this process's to show).
            return
        channel.reserved = max(channel.reserved, reserved)
        self._release_held(channel)

    def _release_held(self, channel: SessionChannel, upto: int | None = None) -> None:
        """Show the held events up to ``upto`` (default: the reservation), in order."""
        limit = channel.reserved if upto is None else upto
        while channel.held and channel.held[0].envelope.seq <= limit:
            item = channel.held.pop(0)
            if item.envelope.seq > channel.written:
                channel.unflushed[item.envelope.seq] = item
            self._publish(channel, item)

    def room(self) -> Awaitable[None] | None:
        """None while the writer has room; else what to await before the next event (the database is
        behind or away, and memory must not grow without bound)."""
        return None if self.writer.has_room() else self.writer.room()

    async def durable(self, channel: SessionChannel) -> bool:
        """Wait until every event the run emitted is committed or given up; False when some were
        given up (the run must then end with an error)."""
        try:
            await self.writer.flush()
        except Exception:  # noqa: BLE001, S110 - a batch was given up: ``lost`` says whether it held ours
            pass
        return not channel.lost

    async def emit_final(
        self, channel: SessionChannel, type_: EventType, data: BaseModel | dict[str, Any], end: RunEnd,
        session_values: dict[str, Any] | None = None,
    ) -> EventEnvelope:
        """Write everything before it, then the terminal event together with the run's ``end`` and
        the session's new ``session_values`` in one transaction (retried in order while the
        database is away); only then publish it and close the channel."""
        if not await self.durable(channel) and type_ is not EventType.ERROR:
            raise EventsNotSaved(channel.run_id)
        item = self._envelope(channel, type_, data)
        taken_over = written = False
        try:
            await self._write_final(channel, item, end, session_values or {})
            written = True
        except RunTakenOver:
            taken_over = True
            raise
        finally:
            if written:
                self._release_held(channel, upto=item.envelope.seq)  # all in the log by now
                self._publish(channel, item)
                self.close_channel(channel)
            elif taken_over:
                # The log already ends this run with another process's event: publishing ours
                # would show readers an end that is not in the log.
                self.abandon(channel)
            elif item.envelope.seq <= channel.reserved:
                # The write failed: readers learn that the run ended without its end saved (not what
                # the end would have said); the session stays ACTIVE in the database and recovery
                # ends it, above the reservation, once the lease expires.
                self._publish(channel, self._unsaved_end(channel, item.envelope.seq))
                self.close_channel(channel)
            else:
                # The write failed and the seq is not reserved: recovery may write its end there,
                # so it is not shown. Readers are cut off and resume from the log.
                self.close_channel(channel)
        return item.envelope

    async def _write_final(
        self, channel: SessionChannel, item: LiveEvent, end: RunEnd, session_values: dict[str, Any],
    ) -> None:
        deadline = time.monotonic() + self._budget_s
        for pause in itertools.chain(RETRY_PAUSES_S, itertools.repeat(RETRY_PAUSES_S[-1])):
            try:
                # Conditional on still owning the run: if this process stalled past its lease and
                # another replica's recovery ended the run, nothing is written (the event would
                # collide with that end). Every seq shown is in the log once this commits: the
                # reservation ends with the run, with the session's state after it.
                notify = self.notifier.notification(channel.session_id, item.envelope.seq)
                if notify is not None:
                    # One statement that also tells the followers: atomic alone, no transaction around it.
                    async with autocommit(self._sessionmaker) as db:
                        if not await RunRepository(db).end(end, item.envelope, session_values, notify):
                            raise RunTakenOver(channel.run_id)
                    return
                async with transaction(self._sessionmaker) as db:
                    if not await RunRepository(db).end(end, item.envelope, session_values):
                        raise RunTakenOver(channel.run_id)
                    await self.notifier.announce(db, channel.session_id, item.envelope.seq)
                return
            except RunTakenOver:
                raise
            except Exception as exc:
                if time.monotonic() + pause > deadline:
                    raise
                log.warning("terminal event could not be written; retrying", extra={
                    "run_id": channel.run_id, "error_type": type(exc).__name__})
                await asyncio.sleep(pause)

    def _unsaved_end(self, channel: SessionChannel, seq: int) -> LiveEvent:
        data = ErrorData(code=ErrorCode.STORAGE_UNAVAILABLE.value, message=UNSAVED_END, retryable=True)
        envelope = _live_envelope(channel.session_id, channel.run_id, seq, EventType.ERROR, utcnow(),
                                  data.model_dump(mode="json"))
        self._metrics.events.inc(EventType.ERROR)
        return LiveEvent(envelope, encode_envelope(envelope))

    def _given_up(self, batch: list[EventEnvelope], _exc: Exception) -> None:
        """The writer gave these events up: their runs must not end as if they were saved."""
        self._metrics.events_lost.inc(len(batch))
        for env in batch:
            channel = self._channels.get(env.session_id)
            if channel is not None and channel.run_id == env.run_id:
                channel.lost = True

    def abandon(self, channel: SessionChannel) -> None:
        """End a run's live side without a terminal event or any further write: another process
        ended the run in the log (its lease was lost). Readers are cut off and resume from the log."""
        self.writer.discard(channel.session_id)
        channel.unflushed.clear()
        channel.held.clear()
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
                channel.written = max(channel.written, env.seq)

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
        await self.notifier.announce(db, session_id, seq)
        self._metrics.events.inc(type_)
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
