"""One WebSocket client of a conversation: its bounded queue and the replay/live send loop."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson
from starlette.websockets import WebSocket

from conversation_service.db.repository import unit_of_work
from conversation_service.realtime.frames import Frame
from conversation_service.realtime.repository import FrameRepository
from conversation_service.state import ServiceState

log = logging.getLogger(__name__)

_REPLAY_BATCH = 500


class ClientConnection:
    """A hub subscriber. ``deliver`` never blocks: a full queue marks the client as slow."""

    def __init__(self, websocket: WebSocket, state: ServiceState, conversation_id: str) -> None:
        self.ws = websocket
        self.state = state
        self.conversation_id = conversation_id
        self.queue: asyncio.Queue[Frame | dict[str, Any]] = asyncio.Queue(maxsize=state.settings.ws_client_queue_size)
        self.overflowed = asyncio.Event()
        self.last_sent = 0

    def backlog(self) -> float:
        """How full the queue is, 0..1: the publisher lets the sender run before it fills up."""
        return self.queue.qsize() / self.queue.maxsize

    def deliver(self, frame: Frame) -> None:
        if self.overflowed.is_set():
            return
        try:
            self.queue.put_nowait(frame)
        except asyncio.QueueFull:
            self.overflowed.set()

    def send_control(self, frame: dict[str, Any]) -> None:
        """A frame for this client only (pong, ack, error): no seq, same ordered send path."""
        try:
            self.queue.put_nowait(frame)
        except asyncio.QueueFull:
            self.overflowed.set()

    async def _send(self, frame: Frame) -> None:
        await self.ws.send_text(frame.to_text())
        self.last_sent = frame.seq
        self.state.metrics.ws_frames_sent.inc()
        stamps = frame.received_at
        if stamps is not None:
            now = time.perf_counter()
            observe = self.state.metrics.agent_event_delivery_seconds.observe
            for stamp in stamps if isinstance(stamps, tuple) else (stamps,):
                observe(now - stamp)

    async def _read_db(self, after: int, upto: int | None = None) -> list[Frame]:
        async with unit_of_work(self.state.sessionmaker) as session:
            frames = await FrameRepository(session).list_after(self.conversation_id, after, limit=_REPLAY_BATCH)
        return [f for f in frames if upto is None or f.seq <= upto]

    async def catch_up(self, target: int) -> None:
        """Send persisted frames after ``last_sent`` up to ``target``, waiting (bounded) for frames
        that are allocated but not committed yet."""
        deadline = time.monotonic() + self.state.settings.ws_replay_wait_s
        while self.last_sent < target:
            frames = await self._read_db(self.last_sent, target)
            for frame in frames:
                if frame.seq > self.last_sent:
                    await self._send(frame)
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
            self.state.publisher.writer.request_flush()
            await self.state.publisher.writer.wait_flushed(min(remaining, 0.05))

    async def run_sender(self) -> None:
        while True:
            item = await self.queue.get()
            if isinstance(item, dict):
                await self.ws.send_text(orjson.dumps(item).decode())
                continue
            if item.seq <= self.last_sent:
                continue  # already sent by the replay
            if item.seq > self.last_sent + 1:
                # A gap: an earlier frame is still on its way (another replica, or published
                # after this one). The database has it within one group commit.
                await self.catch_up(item.seq - 1)
            await self._send(item)
