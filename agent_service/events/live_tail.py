"""Telling the followers of a session that new events of it are in the log.

A reader of a session whose run lives in another process (another replica, another worker) follows
the log (``EventStreamer._follow``). Every transaction that adds events of a session (the group
commit, recovery and cancel writing an ERROR) calls ``announce`` inside that transaction; the notifier
wakes the followers of that session once it has committed, and they read the new events at once. A
run's terminal write on PostgreSQL is one statement that sends the NOTIFY itself (``notification``),
so that it needs no transaction around it.

Why PostgreSQL LISTEN/NOTIFY and not Redis pub/sub: a NOTIFY issued inside the committing
transaction is delivered exactly when (and only if) the transaction commits, so a woken follower
always finds the events in the log, a rolled-back batch wakes nobody, and there is no publish step to
forget after the commit. It needs nothing the Agent Service does not have already (Redis is optional
for it, only for shared rate limits), and the payload (session id, last seq) is tiny. One channel for
every session: followers filter by session in this process.

On SQLite there is no cross-process notification: ``LocalNotifier`` wakes the followers of this
process after the commit, and followers of other processes on the same file poll.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from sqlalchemy import event, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncSession

log = logging.getLogger(__name__)

CHANNEL = "taskforce_agent_events"
# After the listening connection is lost: first retry at once, then back off up to this long.
_RECONNECT_MAX_S = 5.0


class Watch:
    """One follower's view of a session's notifications: ``changed`` is set by each one, ``seq``
    is the highest seq announced since the watch began, ``missed`` says notifications may have been
    lost (the listener reconnected): the follower must read whatever ``seq`` says."""

    __slots__ = ("changed", "missed", "seq")

    def __init__(self) -> None:
        self.changed = asyncio.Event()
        self.seq = 0
        self.missed = False

    def clear(self) -> None:
        self.changed.clear()
        self.missed = False

    def has_news(self, last: int) -> bool:
        """Whether a notification since ``clear`` may concern events after ``last``."""
        return self.changed.is_set() and (self.missed or self.seq > last)


class Counter(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class LiveTailNotifier(ABC):
    """The interface, and the in-process part every implementation shares: the watches."""

    # How often a follower reads the log when no notification came: the safety net for a lost one.
    fallback_poll_s: float

    def __init__(self, fallback_poll_s: float, received: Counter | None = None) -> None:
        self.fallback_poll_s = fallback_poll_s
        self._received = received
        self._watches: dict[str, set[Watch]] = {}

    async def start(self) -> None:
        """Begin listening (no-op for in-process notification)."""

    async def aclose(self) -> None:
        """Stop listening."""

    async def announce(self, db: AsyncSession, session_id: str, seq: int) -> None:
        """Inside the transaction that adds events of ``session_id`` up to ``seq``: wake its
        followers once (and only if) the transaction commits."""
        await self.announce_many(db, {session_id: seq})

    def notification(self, session_id: str, seq: int) -> tuple[str, str] | None:
        """``announce`` as the channel and payload of a NOTIFY that a single statement adding the
        events can send itself (PostgreSQL), so that the statement needs no transaction around it;
        None when announcing takes a step of its own in the transaction (``announce``)."""
        return None

    @abstractmethod
    async def announce_many(self, db: AsyncSession, last_seqs: dict[str, int]) -> None:
        """``announce`` for every session a group commit wrote, in one statement."""

    @contextmanager
    def watch(self, session_id: str) -> Iterator[Watch]:
        watch = Watch()
        self._watches.setdefault(session_id, set()).add(watch)
        try:
            yield watch
        finally:
            watches = self._watches.get(session_id)
            if watches is not None:
                watches.discard(watch)
                if not watches:
                    del self._watches[session_id]

    def _deliver(self, session_id: str, seq: int) -> None:
        if self._received is not None:
            self._received.inc()
        for watch in self._watches.get(session_id, ()):
            watch.seq = max(watch.seq, seq)
            watch.changed.set()

    def _wake_all(self) -> None:
        """Wake every follower: notifications may have been missed (the listener reconnected)."""
        for watches in self._watches.values():
            for watch in watches:
                watch.missed = True
                watch.changed.set()


class LocalNotifier(LiveTailNotifier):
    """In-process only (SQLite): wakes this process's followers after the commit. Other processes
    sharing the file are not told, so ``fallback_poll_s`` is the follow interval there."""

    async def announce_many(self, db: AsyncSession, last_seqs: dict[str, int]) -> None:
        def deliver(_session: object) -> None:
            for session_id, seq in last_seqs.items():
                self._deliver(session_id, seq)

        event.listen(db.sync_session, "after_commit", deliver, once=True)


class PostgresNotifier(LiveTailNotifier):
    """NOTIFY in the committing transaction; LISTEN on a dedicated asyncpg connection, reconnected
    when lost (every follower is woken then, as notifications sent meanwhile are gone)."""

    def __init__(self, url: URL, fallback_poll_s: float, received: Counter | None = None) -> None:
        super().__init__(fallback_poll_s, received)
        # asyncpg takes a plain postgresql:// DSN; the password stays in memory, never logged.
        self._dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._task: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()
        self._closing = asyncio.Event()

    def notification(self, session_id: str, seq: int) -> tuple[str, str] | None:
        return CHANNEL, _payload(session_id, seq)

    async def announce_many(self, db: AsyncSession, last_seqs: dict[str, int]) -> None:
        payloads = [_payload(session_id, seq) for session_id, seq in last_seqs.items()]
        await db.execute(
            text("SELECT pg_notify(:channel, payload) FROM unnest(CAST(:payloads AS text[])) AS payload"),
            {"channel": CHANNEL, "payloads": payloads},
        )

    async def start(self) -> None:
        self._task = asyncio.create_task(self._listen(), name="agent-live-tail-listener")
        # Start-up waits for the first LISTEN (bounded), so followers are pushed from the first request.
        listening = asyncio.ensure_future(self._listening.wait())
        try:
            # FIRST_COMPLETED: the listener task runs for the process's life, so waiting for both
            # (asyncio.wait's default) held every start-up for the whole 10 s.
            done, _ = await asyncio.wait([listening, self._task], timeout=10, return_when=asyncio.FIRST_COMPLETED)
        finally:
            listening.cancel()
        if self._task in done:
            self._task.result()

    async def aclose(self) -> None:
        self._closing.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    def _on_notification(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        session_id, _, seq = payload.rpartition(":")
        try:
            self._deliver(session_id, int(seq))
        except ValueError:
            log.warning("malformed live tail notification ignored")

    async def _listen(self) -> None:
        import asyncpg  # the PostgreSQL driver the engine uses already

        backoff = 0.0
        while not self._closing.is_set():
            conn = None
            try:
                conn = await asyncpg.connect(self._dsn)
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _c, lost=lost: lost.set())
                await conn.add_listener(CHANNEL, self._on_notification)
                if backoff:
                    log.info("live tail listener reconnected")
                    self._wake_all()
                backoff = 0.0
                self._listening.set()
                await _first(lost, self._closing)
                if not self._closing.is_set():
                    log.warning("live tail listener connection lost; followers poll until it is back")
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.warning("live tail listener cannot connect", extra={"error": type(exc).__name__})
            finally:
                if conn is not None and not conn.is_closed():
                    await conn.close(timeout=2)
            backoff = min(max(backoff * 2, 0.1), _RECONNECT_MAX_S)
            if not self._closing.is_set():
                await _first(self._closing, timeout=backoff)


async def _first(*events: asyncio.Event, timeout: float | None = None) -> None:
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def build_notifier(url: URL, *, fallback_poll_s: float, local_poll_s: float, received: Counter | None = None) -> LiveTailNotifier:
    """PostgreSQL: LISTEN/NOTIFY, followers poll only every ``fallback_poll_s`` as a safety net.
    SQLite: in-process wake-ups, and followers in other processes poll every ``local_poll_s``."""
    if url.get_backend_name() == "postgresql":
        return PostgresNotifier(url, fallback_poll_s, received)
    return LocalNotifier(local_poll_s, received)


def _payload(session_id: str, seq: int) -> str:
    return f"{session_id}:{seq}"  # read back by ``PostgresNotifier._on_notification``
