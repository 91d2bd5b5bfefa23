"""The SSE body of execute and of the events endpoint: replay from the log, then the live tail.

Order matters for "no gap, no duplicate": subscribe to the live run first (with a snapshot of its
unwritten events), then read the log after ``after``, then follow the subscription, dropping every
``seq`` already sent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import async_sessionmaker

from agent_service.metrics import AgentMetrics
from agent_service.runs.event_log import EventLog, LiveEvent, LiveSubscription
from agent_service.runs.repository import EventRepository
from agent_service.sessions.repository import SessionRepository
from shared.protocol import EventEnvelope, SessionStatus
from shared.sse import encode_comment, encode_envelope, encode_retry

_PAGE = 500


@dataclass(frozen=True, slots=True)
class StreamSettings:
    heartbeat_seconds: float
    retry_ms: int
    poll_seconds: float


class EventStreamer:
    def __init__(
        self, event_log: EventLog, sessionmaker: async_sessionmaker, settings: StreamSettings,
        metrics: AgentMetrics | None = None,
    ) -> None:
        self._log = event_log
        self._sessionmaker = sessionmaker
        self._settings = settings
        self._metrics = metrics

    def _observe(self, item: LiveEvent) -> None:
        # Called right after ``yield``: the response resumes this generator only once the server
        # has taken the bytes, so this is the delta-to-socket time of the event.
        if self._metrics is not None and item.created is not None:
            self._metrics.event_overhead.observe(time.perf_counter() - item.created)

    async def _read(self, session_id: str, after: int) -> list[EventEnvelope]:
        async with self._sessionmaker() as db:
            return await EventRepository(db).after(session_id, after, _PAGE)

    async def _session_state(self, session_id: str) -> tuple[str | None, str | None]:
        async with self._sessionmaker() as db:
            session = await SessionRepository(db).get(session_id)
            return (session.status, session.current_run_id) if session else (None, None)

    async def stream(
        self, session_id: str, after: int, until_run: str | None = None, live: LiveSubscription | None = None,
    ) -> AsyncIterator[bytes]:
        """SSE bytes of every event of ``session_id`` after ``after``.

        Ends after the terminal event of ``until_run`` (execute: the run started or joined), or
        else of the run live at subscription time; with no live run, once the log is read.
        ``live`` is a subscription taken before the run emitted anything (``RunHandle.live``),
        with ``after`` just before the run's first seq: it holds every event to send.
        """
        settings = self._settings
        if live is not None and live.overflowed:
            # The response started too late to catch up from memory: replay from the log instead.
            self._log.unsubscribe(session_id, live)
            live = None
        if live is not None:
            sub, live_run, snapshot = live, until_run, []
            in_memory = True
        else:
            sub, live_run, snapshot = self._log.subscribe(session_id)
            channel = self._log.channel(session_id)
        stop_run = until_run or live_run
        last = after
        try:
            yield encode_retry(settings.retry_ms)
            # 1. Replay: the log, merged with the live run's not-yet-written events.
            pending = {item.envelope.seq: item for item in snapshot if item.envelope.seq > last}
            if live is None:
                # When the snapshot holds every event after ``after`` (a client a few events
                # behind), the log has nothing more: skip reading it. Under load that read waits
                # behind the group commits and would hold the live events back meanwhile.
                in_memory = (
                    channel is not None and sub is not None and len(pending) == channel.next_seq - 1 - after
                )
            while not in_memory:
                page = await self._read(session_id, last)
                for env in page:
                    pending.pop(env.seq, None)
                    if env.seq <= last:
                        continue
                    yield encode_envelope(env)
                    last = env.seq
                    if env.is_terminal and env.run_id == stop_run:
                        return
                if len(page) < _PAGE:
                    break
            for seq in sorted(pending):
                if seq <= last:
                    continue
                item = pending[seq]
                yield item.sse
                self._observe(item)
                last = seq
                if item.envelope.is_terminal and item.envelope.run_id == stop_run:
                    return

            # 2. Live tail from this process's run.
            if sub is not None:
                while True:
                    item = await sub.get(settings.heartbeat_seconds)
                    if item is None:
                        if sub.ended:
                            # Overflowed (the client resumes with Last-Event-ID), or the run ended
                            # and its terminal event was already sent from the replay.
                            return
                        yield encode_comment("heartbeat")
                        continue
                    # Everything already queued goes out in one write: one pass through the
                    # ASGI stack for a burst instead of one per event.
                    batch: list[LiveEvent] = []
                    for queued in (item, *sub.take_all()):
                        if queued.envelope.seq > last:
                            batch.append(queued)
                    if not batch:
                        continue
                    yield b"".join(queued.sse for queued in batch) if len(batch) > 1 else batch[0].sse
                    for queued in batch:
                        self._observe(queued)
                    last = batch[-1].envelope.seq
                    # A terminal event is the channel's last: it can only end a batch.
                    if batch[-1].envelope.is_terminal and batch[-1].envelope.run_id == stop_run:
                        return

            # 3. No run here: if another process runs the session, follow its log.
            async for chunk in self._follow(session_id, last, stop_run):
                yield chunk
        finally:
            if sub is not None:
                self._log.unsubscribe(session_id, sub)

    async def _follow(self, session_id: str, last: int, stop_run: str | None) -> AsyncIterator[bytes]:
        settings = self._settings
        last_beat = time.monotonic()
        while True:
            # Status first, events second: once the status is no longer ACTIVE, the read that
            # follows holds every event the run wrote.
            status, current_run = await self._session_state(session_id)
            target = stop_run or current_run
            while True:
                page = await self._read(session_id, last)
                for env in page:
                    yield encode_envelope(env)
                    last = env.seq
                    if env.is_terminal and env.run_id == target:
                        return
                if len(page) < _PAGE:
                    break
            if status != SessionStatus.ACTIVE.value:
                return
            if time.monotonic() - last_beat >= settings.heartbeat_seconds:
                yield encode_comment("heartbeat")
                last_beat = time.monotonic()
            # Polling is the cross-process fallback only; a run of this process is pushed live.
            await asyncio.sleep(settings.poll_seconds)
