"""Group commit of frames to ``conversation_frames``.

Deltas arrive per token; one transaction each would make the database the bottleneck. Frames are
written by ``shared.group_commit.GroupCommitter``: one transaction per batch, at most ``interval``
after the first frame of a batch (50 ms by default), or at once when an event boundary asks
(``request_flush``). A full queue (database far behind) slows emitters down instead of growing
memory. While the database is away the batches are retried in order for ``retry_for_s``; frames
given up after that are remembered per conversation (``durable``), so that a reply they belonged to
ends with an error rather than as complete over the hole.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict

from sqlalchemy.ext.asyncio import async_sessionmaker

from conversation_service.metrics import FrameMetrics
from conversation_service.realtime.frames import Frame
from conversation_service.realtime.repository import FrameRepository
from shared.group_commit import GroupCommitter
from shared.transactions import transaction

log = logging.getLogger(__name__)

# Conversations whose given-up frames are remembered (the oldest forgotten first).
_LOST_KEPT = 10_000


class FrameWriter:
    def __init__(
        self, sessionmaker: async_sessionmaker, *, interval: float, max_batch: int, queue_size: int,
        metrics: FrameMetrics, retry_for_s: float = 30.0,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._metrics = metrics
        # Highest seq per conversation that is queued or being written but not yet committed.
        self._pending: dict[str, int] = {}
        # Highest seq per conversation of a frame given up (never stored).
        self._lost: OrderedDict[str, int] = OrderedDict()
        self._commits: GroupCommitter[Frame] = GroupCommitter(
            self._write, interval_s=interval, max_batch=max_batch, max_pending=queue_size, name="frame-writer",
            retry_for_s=retry_for_s, on_given_up=self._given_up,
        )

    def start(self) -> None:
        self._commits.start()

    async def close(self) -> None:
        """Write what is queued, then stop."""
        await self._commits.aclose()

    async def enqueue(self, frame: Frame) -> None:
        self._pending[frame.conversation_id] = max(self._pending.get(frame.conversation_id, 0), frame.seq)
        await self._commits.put(frame)

    def pending_max(self, conversation_id: str) -> int:
        return self._pending.get(conversation_id, 0)

    def request_flush(self) -> None:
        self._commits.request_flush()

    async def wait_flushed(self, timeout: float) -> bool:
        """Wait for the next committed batch; False when none came within ``timeout``."""
        return await self._commits.wait_written(timeout)

    async def flush(self) -> None:
        """Commit everything queued so far (raises when some of it was given up)."""
        await self._commits.flush()

    async def durable(self, conversation_id: str, since_seq: int) -> bool:
        """Wait until every frame queued so far is committed or given up; False when a frame of
        ``conversation_id`` at ``since_seq`` or later was given up."""
        try:
            await self._commits.flush()
        except Exception:  # noqa: BLE001, S110 - given up: ``_lost`` says whether that concerns this reply
            pass
        lost = self._lost.get(conversation_id)
        return lost is None or lost < since_seq

    async def _write(self, batch: list[Frame]) -> None:
        started = time.perf_counter()
        async with transaction(self._sessionmaker) as session:
            await FrameRepository(session).insert_many(batch)
        self._metrics.flush_seconds.observe(time.perf_counter() - started)
        self._metrics.persisted.inc(len(batch))
        self._settled(batch)

    def _given_up(self, batch: list[Frame], _exc: Exception) -> None:
        # Live clients had these frames; a replay would miss them: their replies must not end as complete.
        self._metrics.lost.inc(len(batch))
        for frame in batch:
            cid = frame.conversation_id
            self._lost[cid] = max(self._lost.get(cid, 0), frame.seq)
            self._lost.move_to_end(cid)
        while len(self._lost) > _LOST_KEPT:
            self._lost.popitem(last=False)
        self._settled(batch)

    def _settled(self, batch: list[Frame]) -> None:
        for frame in batch:
            if self._pending.get(frame.conversation_id) == frame.seq:
                del self._pending[frame.conversation_id]
