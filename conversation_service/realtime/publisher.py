"""``FramePublisher``: the one way to put a frame on a conversation's live stream.

Allocates the seq, hands the frame to the group-commit writer (so a replay can find it), then
publishes it to the hub. Emits of one conversation are serialised in this process so its clients
normally see seqs in order; across replicas the client's gap check restores the order.
"""

from __future__ import annotations

import time

from conversation_service.metrics import FrameMetrics
from conversation_service.realtime.frames import Frame, FrameData, TurnProgress
from conversation_service.realtime.hub import Hub
from conversation_service.realtime.seq import SeqAllocator
from conversation_service.realtime.writer import FrameWriter
from shared.keyed_lock import KeyedLock


class FramePublisher:
    def __init__(self, seq: SeqAllocator, writer: FrameWriter, hub: Hub, metrics: FrameMetrics) -> None:
        self._seq = seq
        self._writer = writer
        self._hub = hub
        self._metrics = metrics
        self._locks = KeyedLock()

    async def emit(
        self, conversation_id: str, data: FrameData, *, boundary: bool = False, progress: TurnProgress | None = None,
    ) -> Frame:
        """Publish one frame of ``data``'s type. ``boundary=True`` (a message completed) commits it
        without waiting for the group-commit window; ``progress`` is stored with it (``TurnProgress``)."""
        started = time.perf_counter()
        type = data.TYPE
        async with self._locks(conversation_id):
            frame = Frame(type=type, seq=await self._seq.next(conversation_id), conversation_id=conversation_id,
                          data=data.data(), progress=progress)
            await self._writer.enqueue(frame)
            await self._hub.publish(frame)
        if boundary:
            self._writer.request_flush()
        self._metrics.published[type].inc()
        self._metrics.emit_seconds.observe(time.perf_counter() - started)
        return frame

    async def durable(self, conversation_id: str, since_seq: int) -> bool:
        """Wait until every frame published so far is stored or given up; False when a frame of
        ``conversation_id`` from ``since_seq`` on was given up (the database stayed away too long)."""
        return await self._writer.durable(conversation_id, since_seq)
