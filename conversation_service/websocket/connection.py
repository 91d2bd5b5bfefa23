"""One WebSocket client of a conversation: the replay on connect, then live frames.

Frames reach the socket through a ``Handoff``: while the client keeps up, ``deliver`` writes the
frame in the publisher's own step (the socket write completes at once when its buffer has room),
so a frame does not wait for a sender task to be scheduled behind everything else on the loop.
Only while a write waits for a client that reads slowly do its frames queue, bounded by
``ws_client_queue_size``; past that the client is flagged ``overflowed`` and closed, and resumes
with ``after_seq``. One client's queue never holds up another client or the publisher.

A client that asked for batches (``?batch=1``) gets the frames that queued for it while it was
behind, and each page of a replay, in one WebSocket message: ``{"type": "batch", "frames": [...]}``,
the frames in seq order, each as it would have gone alone (its encoding is reused, not redone). A
client that keeps up still gets each frame at once, alone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import async_sessionmaker
from starlette.websockets import WebSocket

from conversation_service.metrics import WebSocketMetrics, agent_events_in_hand
from conversation_service.realtime.frames import Frame
from conversation_service.realtime.repository import FrameRepository
from conversation_service.realtime.writer import FrameWriter
from shared.fastpath.handoff import Handoff
from shared.transactions import is_unavailable, transaction

log = logging.getLogger(__name__)

_REPLAY_BATCH = 500
# First in every client's queue: holds the live frames back until ``start`` (the handshake is done
# and, on a resume, the replay goes out before them).
_START = object()
# Catch up from the database: the hub may have missed frames (Redis away).
_REFILL = object()


class ClientConnection:
    """A hub subscriber. ``deliver`` never waits: a client too far behind is flagged ``overflowed``;
    a failed send (client gone) sets ``send_failed`` with the exception in ``error``."""

    def __init__(
        self, websocket: WebSocket, conversation_id: str, *, sessionmaker: async_sessionmaker, writer: FrameWriter,
        metrics: WebSocketMetrics, queue_size: int, replay_wait_s: float, batches: bool = False,
    ) -> None:
        self.ws = websocket
        self.conversation_id = conversation_id
        self._sessionmaker = sessionmaker
        self._writer = writer
        self._metrics = metrics
        self._replay_wait_s = replay_wait_s
        self.overflowed = asyncio.Event()
        self.send_failed = asyncio.Event()
        self.last_sent = 0
        self._batches = batches
        # Frames taken for the next write, with the agent event stamps to observe once it is done.
        self._out: list[Frame] = []
        self._out_stamps: list[tuple[float, ...]] = []
        self._replay_to: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._outbox: Handoff[Any] = Handoff(
            self._send_batch, maxsize=queue_size, name=f"ws-send:{conversation_id}",
            on_error=lambda _exc: self.send_failed.set(),
        )
        self._refill_queued = False
        self._outbox.offer(_START)

    @property
    def error(self) -> BaseException | None:
        return self._outbox.error

    def start(self, after_seq: int | None, target: int) -> None:
        """Begin sending, once the handshake is complete: persisted frames ``after_seq``..``target``
        first (none when ``after_seq`` is None: live only), then the live frames, each seq once."""
        if self._replay_to.done():
            return  # closed already: it overflowed while the handshake was under way
        self.last_sent = target if after_seq is None else after_seq
        self._replay_to.set_result(target)

    def deliver(self, frame: Frame) -> None:
        # The stamps in effect now are this frame's: by the time a queued frame is sent, they are not.
        self._offer((frame, agent_events_in_hand()))

    def refill(self) -> None:
        """Send the stored frames after the last one sent, in order with the live ones (the hub may have
        missed frames of this conversation while Redis was away). One refill waits at a time."""
        if not self._refill_queued:
            self._refill_queued = True
            self._offer(_REFILL)

    def send_control(self, frame: dict[str, Any]) -> None:
        """A frame for this client only (pong, ack, error): no seq, same ordered send path."""
        self._offer(frame)

    def close(self) -> None:
        """Stop sending; frames still queued are dropped (a resume gets them from the database)."""
        self._outbox.close()

    def _offer(self, item: tuple[Frame, tuple[float, ...] | None] | dict[str, Any] | object) -> None:
        outbox = self._outbox
        if outbox.offer(item) or outbox.closed or outbox.error is not None:
            return
        # Refused while open: the queue is full behind a write this client is not reading (or
        # behind its replay). Its backlog is dropped; it is closed and resumes from the database.
        self.overflowed.set()
        outbox.close()

    async def _send_batch(self, batch: list[Any]) -> None:
        for item in batch:
            if isinstance(item, tuple):
                frame, stamps = item
                taken = self._out[-1].seq if self._out else self.last_sent
                if frame.seq <= taken:
                    continue  # already sent by a replay
                if frame.seq > taken + 1:
                    # A gap: an earlier frame is still on its way (another replica, or published
                    # after this one). The database has it within one group commit.
                    await self._write_out()
                    await self.catch_up(frame.seq - 1)
                self._take(frame, stamps)
            elif item is _START:
                await self._write_out()
                await self.catch_up(await self._replay_to)
            elif item is _REFILL:
                self._refill_queued = False
                await self._write_out()
                await self._refill()
            else:
                await self._write_out()
                await self.ws.send_text(orjson.dumps(item).decode())
        await self._write_out()

    def _take(self, frame: Frame, stamps: tuple[float, ...] | None = None) -> None:
        """``frame`` goes out with the next write, in order."""
        self._out.append(frame)
        if stamps:
            self._out_stamps.append(stamps)

    async def _write_out(self) -> None:
        """Write the frames taken: one message carrying them all for a client that asked for
        batches, else one message each."""
        frames, self._out = self._out, []
        if not frames:
            return
        stamps, self._out_stamps = self._out_stamps, []
        if len(frames) == 1:
            await self.ws.send_text(frames[0].to_text())
        elif self._batches:
            await self.ws.send_text('{"type":"batch","frames":[' + ",".join(f.to_text() for f in frames) + "]}")
        else:
            for frame in frames:
                await self.ws.send_text(frame.to_text())
                self.last_sent = frame.seq
        self.last_sent = frames[-1].seq
        self._metrics.frames_sent.inc(len(frames))
        if stamps:
            now = time.perf_counter()
            observe = self._metrics.agent_event_delivery_seconds.observe
            for group in stamps:
                for stamp in group:
                    observe(now - stamp)

    async def _read_db(self, after: int, upto: int | None = None) -> list[Frame]:
        async with transaction(self._sessionmaker) as session:
            frames = await FrameRepository(session).list_after(self.conversation_id, after, limit=_REPLAY_BATCH)
        return [f for f in frames if upto is None or f.seq <= upto]

    async def _refill(self) -> None:
        try:
            while True:
                frames = await self._read_db(self.last_sent)
                for frame in frames:
                    if frame.seq > self.last_sent:
                        self._take(frame)
                await self._write_out()
                if len(frames) < _REPLAY_BATCH:
                    return
        except Exception as exc:  # the database away too: the next refill tries again
            if is_unavailable(exc):
                log.warning("refill from the database failed", extra={"error_type": type(exc).__name__})
                return
            raise

    async def catch_up(self, target: int) -> None:
        """Send persisted frames after ``last_sent`` up to ``target``, waiting (bounded) for frames
        that are allocated but not committed yet."""
        deadline = time.monotonic() + self._replay_wait_s
        while self.last_sent < target:
            frames = await self._read_db(self.last_sent, target)
            for frame in frames:
                if frame.seq > self.last_sent:
                    self._take(frame)
            await self._write_out()
            if frames and len(frames) == _REPLAY_BATCH:
                continue
            if self.last_sent >= target:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                # A seq allocated but never persisted (its writer died): do not wait forever.
                log.warning("replay gave up waiting for unpersisted frames",
                            extra={"last_sent": self.last_sent, "target": target})
                return
            self._writer.request_flush()
            await self._writer.wait_flushed(min(remaining, 0.05))
