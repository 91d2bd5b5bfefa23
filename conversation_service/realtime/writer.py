"""Group commit of frames to ``conversation_frames``.

Deltas arrive per token; one transaction each would make the database the bottleneck. Frames
queue here and are written in one transaction per batch, at most ``interval`` after the first one
of a batch (50 ms by default) or at once when an event boundary asks for ``flush()``.
"""

from __future__ import annotations

import asyncio
import logging
import time

from sqlalchemy.ext.asyncio import async_sessionmaker

from conversation_service.db.repository import unit_of_work
from conversation_service.metrics import FrameMetrics
from conversation_service.realtime.frames import Frame
from conversation_service.realtime.repository import FrameRepository

log = logging.getLogger(__name__)

_WRITE_ATTEMPTS = 3


class FrameWriter:
    def __init__(
        self,
        sessionmaker: async_sessionmaker,
        *,
        interval: float,
        max_batch: int,
        queue_size: int,
        metrics: FrameMetrics,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._interval = interval
        self._max_batch = max_batch
        self._queue: asyncio.Queue[Frame] = asyncio.Queue(maxsize=queue_size)
        self._metrics = metrics
        self._flush_now = asyncio.Event()
        self._flushed = asyncio.Event()
        # Highest seq per conversation that is queued or being written but not yet committed.
        self._pending: dict[str, int] = {}
        self._task: asyncio.Task | None = None
        self._closing = False

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="frame-writer")

    async def close(self) -> None:
        """Write what is queued, then stop."""
        self._closing = True
        self._flush_now.set()
        if self._task is not None:
            await self._task

    async def enqueue(self, frame: Frame) -> None:
        # A full queue (database far behind) slows emitters down instead of growing memory.
        self._pending[frame.conversation_id] = max(self._pending.get(frame.conversation_id, 0), frame.seq)
        await self._queue.put(frame)

    def pending_max(self, conversation_id: str) -> int:
        return self._pending.get(conversation_id, 0)

    def request_flush(self) -> None:
        self._flush_now.set()

    async def wait_flushed(self, timeout: float) -> bool:
        """Wait for the next committed batch; False when none came within ``timeout``."""
        event = self._flushed
        try:
            await asyncio.wait_for(event.wait(), timeout)
            return True
        except TimeoutError:
            return False

    async def flush(self, timeout: float = 5.0) -> None:
        """Commit everything queued so far (an event boundary: a message completed)."""
        if self._queue.empty() and not self._pending:
            return
        deadline = time.monotonic() + timeout
        self._flush_now.set()
        while (self._pending or not self._queue.empty()) and time.monotonic() < deadline:
            await self.wait_flushed(max(0.0, deadline - time.monotonic()))

    async def _run(self) -> None:
        while True:
            if self._queue.empty():
                if self._closing:
                    return
                frame = await self._wait_for_frame()
                if frame is None:
                    continue
                batch = [frame]
            else:
                batch = [self._queue.get_nowait()]
            if not self._closing:
                # The group-commit window: more frames join the batch until it closes or an
                # event boundary asks for the write now.
                try:
                    await asyncio.wait_for(self._flush_now.wait(), self._interval)
                except TimeoutError:
                    pass
            if not self._closing:
                self._flush_now.clear()
            while len(batch) < self._max_batch and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            await self._write(batch)

    async def _wait_for_frame(self) -> Frame | None:
        """The next frame, or None when woken by ``close()``/``flush()`` with nothing queued."""
        getter = asyncio.ensure_future(self._queue.get())
        waker = asyncio.ensure_future(self._flush_now.wait())
        await asyncio.wait({getter, waker}, return_when=asyncio.FIRST_COMPLETED)
        waker.cancel()
        if getter.done():
            return getter.result()
        # Queue.get takes the item only after its wait returns, so cancelling here loses nothing.
        getter.cancel()
        await asyncio.gather(getter, waker, return_exceptions=True)
        if not self._closing:
            self._flush_now.clear()
        return None

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
        flushed, self._flushed = self._flushed, asyncio.Event()
        flushed.set()
