"""``FramePublisher``: the one way to put a frame on a conversation's live stream.

Allocates the seq, hands the frame to the group-commit writer (so a replay can find it), then
publishes it to the hub. Emits of one conversation are serialised in this process so its clients
normally see seqs in order; across replicas the client's gap check restores the order.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from conversation_service.metrics import ConversationMetrics
from conversation_service.realtime.frames import Frame
from conversation_service.realtime.hub import Hub
from conversation_service.realtime.seq import SeqAllocator
from conversation_service.realtime.writer import FrameWriter


class _KeyedLocks:
    """One lock per conversation, dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    async def acquire(self, key: str) -> asyncio.Lock:
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        await lock.acquire()
        return lock

    def release(self, key: str, lock: asyncio.Lock) -> None:
        lock.release()
        _, users = self._locks[key]
        if users <= 1:
            del self._locks[key]
        else:
            self._locks[key] = (lock, users - 1)


class FramePublisher:
    def __init__(self, seq: SeqAllocator, writer: FrameWriter, hub: Hub, metrics: ConversationMetrics) -> None:
        self.seq = seq
        self.writer = writer
        self.hub = hub
        self._metrics = metrics
        self._locks = _KeyedLocks()
        # labels() validates and locks on every call; a frame is published per token, so the
        # labelled child is looked up once per frame type.
        self._published: dict[str, Any] = {}

    async def emit(
        self, conversation_id: str, type: str, data: dict[str, Any], *, boundary: bool = False,
        received_at: float | tuple[float, ...] | None = None,
    ) -> Frame:
        """Publish one frame. ``boundary=True`` (a message completed) commits it without waiting
        for the group-commit window. ``received_at`` stamps a frame made from an agent event."""
        started = time.perf_counter()
        lock = await self._locks.acquire(conversation_id)
        try:
            frame = Frame(
                type=type, seq=await self.seq.next(conversation_id), conversation_id=conversation_id, data=data,
                received_at=received_at,
            )
            await self.writer.enqueue(frame)
            await self.hub.publish(frame)
        finally:
            self._locks.release(conversation_id, lock)
        if boundary:
            self.writer.request_flush()
        counter = self._published.get(type)
        if counter is None:
            counter = self._published[type] = self._metrics.frames_published.labels(type=type)
        counter.inc()
        self._metrics.frame_emit_seconds.observe(time.perf_counter() - started)
        return frame
