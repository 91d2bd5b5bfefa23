"""The SSE body of execute and of the events endpoint: replay from the log, then the live tail.

Order matters for "no gap, no duplicate": subscribe to the live run first (with a snapshot of its
unwritten events), then read the log after ``after``, then follow the subscription, dropping every
``seq`` already sent.

On a graceful stop (``stopping``, set by ``shared.serving`` on SIGTERM) every stream ends cleanly at
once, whatever it was waiting for: the client resumes with ``Last-Event-ID`` on another replica or
after the restart, and nothing holds the stop up until its grace period runs out.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import async_sessionmaker
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from agent_service.events.event_log import EventLog, LiveEvent, LiveSubscription
from agent_service.metrics import AgentMetrics
from agent_service.repository import EventRepository, SessionRepository
from shared.fastpath.direct_body import body_send
from shared.fastpath.handoff import Handoff
from shared.protocol import EventEnvelope, SessionStatus
from shared.sse import SSE_MEDIA_TYPE, encode_comment, encode_envelope, encode_retry

_PAGE = 500
HEARTBEAT = encode_comment("heartbeat")
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

# Writes SSE bytes to the client; returns once the server has taken them.
Write = Callable[[bytes], Awaitable[None]]
# Turns one event into the bytes a client reads (default: our SSE envelope, encoded once per event).
Encode = Callable[[EventEnvelope], bytes]


@dataclass(frozen=True, slots=True)
class StreamSettings:
    heartbeat_seconds: float
    retry_ms: int


class EventStreamer:
    def __init__(
        self, event_log: EventLog, sessionmaker: async_sessionmaker, settings: StreamSettings,
        metrics: AgentMetrics | None = None, stopping: asyncio.Event | None = None,
    ) -> None:
        self._log = event_log
        self._notifier = event_log.notifier
        self._sessionmaker = sessionmaker
        self._settings = settings
        self._metrics = metrics
        self._stopping = stopping

    def _observe(self, item: LiveEvent) -> None:
        # Called once ``write`` returned, i.e. the server has taken the bytes: this is the
        # delta-to-socket time of the event.
        if self._metrics is not None and item.created is not None:
            self._metrics.event_overhead.observe(time.perf_counter() - item.created)

    async def _logged(self, session_id: str, after: int) -> AsyncIterator[EventEnvelope]:
        """The events of ``session_id`` in the log after ``after``, in seq order, read a page at a
        time: the next page is read once the caller took the whole previous one, and a short page
        is the last. No database session is held between pages, so a caller may stop at any event."""
        while True:
            async with self._sessionmaker() as db:
                page = await EventRepository(db).after(session_id, after, _PAGE)
            for env in page:
                yield env
                after = env.seq
            if len(page) < _PAGE:
                return

    async def _session_state(self, session_id: str) -> tuple[str | None, str | None]:
        async with self._sessionmaker() as db:
            session = await SessionRepository(db).get(session_id)
            return (session.status, session.current_run_id) if session else (None, None)

    async def serve(
        self, write: Write, session_id: str, after: int, until_run: str | None = None,
        live: LiveSubscription | None = None, disconnected: asyncio.Event | None = None,
        encode: Encode | None = None,
    ) -> None:
        """Write the SSE bytes of every event of ``session_id`` after ``after`` with ``write``.

        Ends after the terminal event of ``until_run`` (execute: the run started or joined), or
        else of the run live at subscription time; with no live run, once the log is read; and
        as soon as ``disconnected`` or ``stopping`` is set. ``live`` is a subscription taken before the run
        emitted anything (``RunHandle.live``), with ``after`` just before the run's first seq: it
        holds every event to send. ``encode``: another wire format for the events (A2A's); by
        default each event is written as the SSE envelope it was encoded to once, when emitted.
        """
        settings = self._settings
        encoded = _encoder(encode)
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
        stops = [event for event in (disconnected, self._stopping) if event is not None]
        try:
            await write(encode_retry(settings.retry_ms))
            # 1. Replay: the log, merged with the live run's not-yet-written events.
            pending = {item.envelope.seq: item for item in snapshot if item.envelope.seq > last}
            if live is None:
                # When the snapshot holds every event after ``after`` (a client a few events
                # behind), the log has nothing more: skip reading it. Under load that read waits
                # behind the group commits and would hold the live events back meanwhile.
                in_memory = (
                    channel is not None and sub is not None and len(pending) == channel.next_seq - 1 - after
                )
            if not in_memory:
                async with aclosing(self._logged(session_id, last)) as logged:
                    async for env in logged:
                        pending.pop(env.seq, None)
                        await write(encode(env) if encode else encode_envelope(env))
                        last = env.seq
                        if env.is_terminal and env.run_id == stop_run:
                            return
            for seq in sorted(pending):
                if seq <= last:
                    continue
                item = pending[seq]
                await write(encoded(item))
                self._observe(item)
                last = seq
                if item.envelope.is_terminal and item.envelope.run_id == stop_run:
                    return

            # 2. Live tail from this process's run. Whether it ended with the run, by an overflow
            # (the client resumes with Last-Event-ID) or by a disconnect, nothing follows it.
            if sub is not None:
                await self._tail(write, sub, last, stop_run, stops, encoded)
                return

            # 3. No run here: if another process runs the session, follow its log.
            await self._follow(write, session_id, last, stop_run, stops, encode or encode_envelope)
        finally:
            if sub is not None:
                self._log.unsubscribe(session_id, sub)

    async def _tail(
        self, write: Write, sub: LiveSubscription, last: int, stop_run: str | None, stops: list[asyncio.Event],
        encoded: Callable[[LiveEvent], bytes],
    ) -> None:
        """Follow ``sub`` until the run's terminal event is written, the subscription ends, or
        one of ``stops`` is set (the client went away, the service is stopping). The writes happen in ``consume``, called by the run as it emits
        (see ``LiveSubscription.attach``), not in this coroutine."""
        finished = asyncio.Event()
        sent = last

        async def consume(batch: list[LiveEvent | bytes]) -> None:
            nonlocal sent
            items = [item for item in batch if isinstance(item, bytes) or item.envelope.seq > sent]
            if not items:
                return
            # Everything queued while the previous write waited goes out in one write.
            await write(b"".join(item if isinstance(item, bytes) else encoded(item) for item in items))
            for item in items:
                if isinstance(item, LiveEvent):
                    self._observe(item)
                    sent = item.envelope.seq
                    # A terminal event is the channel's last.
                    if item.envelope.is_terminal and item.envelope.run_id == stop_run:
                        finished.set()

        handoff: Handoff[LiveEvent | bytes] = Handoff(
            consume, maxsize=sub.maxsize, name="agent-sse-tail", on_error=lambda _exc: finished.set()
        )
        watched = [finished, sub.changed, *stops]
        try:
            sub.attach(handoff)
            while not any(event.is_set() for event in watched):
                if not await _wait_any(watched, self._settings.heartbeat_seconds) and not handoff.busy:
                    handoff.offer(HEARTBEAT)
            if sub.closed and not sub.overflowed and not finished.is_set():
                # The run ended: what it published last may still be on its way to a slow client.
                while handoff.busy and not any(event.is_set() for event in stops):
                    await _wait_any([handoff.idle, *stops], None)
        finally:
            handoff.close()

    async def _follow(
        self, write: Write, session_id: str, last: int, stop_run: str | None, stops: list[asyncio.Event],
        encode: Encode,
    ) -> None:
        """Follow the log of a session another process runs: read it whenever the notifier says a
        commit added events (``live_tail``), until the run's terminal event or a stop."""
        notifier = self._notifier
        next_beat = time.monotonic() + self._settings.heartbeat_seconds
        cause = "start"
        with notifier.watch(session_id) as watch:
            while True:
                # Cleared before reading: a commit announced from here on wakes the wait below.
                watch.clear()
                # Status first, events second: once the status is no longer ACTIVE, the read that
                # follows holds every event the run wrote.
                status, current_run = await self._session_state(session_id)
                target = stop_run or current_run
                if self._metrics is not None:
                    self._metrics.follow_reads[cause].inc()
                async with aclosing(self._logged(session_id, last)) as logged:
                    async for env in logged:
                        await write(encode(env))
                        last = env.seq
                        if env.is_terminal and env.run_id == target:
                            return
                if status != SessionStatus.ACTIVE.value:
                    return
                # The slow poll is only the safety net for a lost notification (the listening
                # connection dropped, or processes on one SQLite file, which cannot notify).
                next_poll = time.monotonic() + notifier.fallback_poll_s
                while True:
                    timeout = max(0.0, min(next_poll, next_beat) - time.monotonic())
                    await _wait_any([watch.changed, *stops], timeout)
                    if any(event.is_set() for event in stops):
                        return
                    if time.monotonic() >= next_beat:
                        await write(HEARTBEAT)
                        next_beat = time.monotonic() + self._settings.heartbeat_seconds
                    if watch.has_news(last):
                        cause = "notified"
                        break
                    if watch.changed.is_set():
                        watch.clear()  # a commit of events this reader has already sent
                    elif time.monotonic() >= next_poll:
                        cause = "poll"
                        break


def _encoder(encode: Encode | None) -> Callable[[LiveEvent], bytes]:
    """The bytes of a live event: as encoded when it was emitted, or by ``encode``."""
    if encode is None:
        return lambda item: item.sse
    return lambda item: encode(item.envelope)


async def _wait_any(events: list[asyncio.Event], timeout: float | None) -> bool:
    """Wait until one of ``events`` is set (True) or ``timeout`` passes (False)."""
    if any(event.is_set() for event in events):
        return True
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        if not waiters:
            await asyncio.sleep(timeout or 0)
            return False
        done, _ = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        return bool(done)
    finally:
        for waiter in waiters:
            waiter.cancel()


class EventStreamResponse(Response):
    """The SSE response of execute and of the events endpoint.

    A plain ASGI response rather than a ``StreamingResponse`` over a generator: a generator is
    driven by the response's own task, so every live event would wait for that task to be
    scheduled. Here ``EventStreamer.serve`` gets the send function itself, and a live event is
    written by the run that emits it. The response also listens for the client's disconnect, so a
    reader that went away stops being fed at once.
    """

    media_type = SSE_MEDIA_TYPE

    def __init__(
        self, serve: Callable[[Write, asyncio.Event], Awaitable[None]], headers: dict[str, str], status_code: int = 200,
    ) -> None:
        # The default of ``status_code`` is what FastAPI documents as the routes' success answer:
        # without it the OpenAPI document could not be built. As StreamingResponse does: no body,
        # so no Content-Length (chunked transfer).
        self.status_code = status_code
        self.background = None
        self.init_headers({**SSE_HEADERS, **headers})
        self._serve = serve

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        disconnected = asyncio.Event()

        async def listen() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            disconnected.set()

        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        # The middlewares act on the start message only: the body goes past them (see direct_body).
        send_body = body_send(scope, send)

        async def write(data: bytes) -> None:
            if not disconnected.is_set():
                await send_body({"type": "http.response.body", "body": data, "more_body": True})

        listener = asyncio.create_task(listen(), name="agent-sse-disconnect")
        try:
            await self._serve(write, disconnected)
        finally:
            listener.cancel()
        if not disconnected.is_set():
            await send_body({"type": "http.response.body", "body": b"", "more_body": False})
