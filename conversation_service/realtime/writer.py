"""Group commit of frames to ``conversation_frames``.

Deltas arrive per token; one transaction each would make the database the bottleneck. Frames are
written by ``shared.group_commit.GroupCommitter``: one transaction per batch, at most ``interval``
after the first frame of a batch (50 ms by default), or at once when an event boundary asks
(``request_flush``). A full queue (database far behind) slows emitters down instead of growing
memory.
"""

from __future__ import annotations

import logging
import time

from sqlalchemy.ext.asyncio import async_sessionmaker

from conversation_service.db.repository import unit_of_work
from conversation_service.metrics import FrameMetrics
from conversation_service.realtime.frames import Frame
from conversation_service.realtime.repository import FrameRepository
from shared.group_commit import GroupCommitter

log = logging.getLogger(__name__)

_WRITE_ATTEMPTS = 3


class FrameWriter:
    def __init__(
        self, sessionmaker: async_sessionmaker, *, interval: float, max_batch: int, queue_size: int,
        metrics: FrameMetrics,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._metrics = metrics
        # Highest seq per conversation that is queued or being written but not yet committed.
        self._pending: dict[str, int] = {}
        self._commits: GroupCommitter[Frame] = GroupCommitter(
            self._write, interval_s=interval, max_batch=max_batch, max_pending=queue_size, name="frame-writer"
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
        """Commit everything queued so far."""
        await self._commits.flush()

    async def _write(self, batch: list[Frame]) -> None:
        started = time.perf_counter()
        for attempt in range(1, _WRITE_ATTEMPTS + 1):
            try:
                async with unit_of_work(self._sessionmaker) as session:
                    await FrameRepository(session).insert_many(batch)
                break
            except Exception:
                if attempt == _WRITE_ATTEMPTS:
                    # Live clients already have these frames; only a later replay misses them.
                    log.exception("could not persist frames", extra={"frames": len(batch)})
                    self._metrics.lost.inc(len(batch))
                else:
                    log.warning("frame batch write failed; retrying", extra={"attempt": attempt})
        self._metrics.flush_seconds.observe(time.perf_counter() - started)
        self._metrics.persisted.inc(len(batch))
        for frame in batch:
            if self._pending.get(frame.conversation_id) == frame.seq:
                del self._pending[frame.conversation_id]
