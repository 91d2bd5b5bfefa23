"""``RememberQueue``: the turns of completed runs, written to long-term memory one at a time in the
background, after each run's terminal event.

A run never waits for its memory write: its turn is offered here once its COMPLETE is written, and a
slow or failing store costs the run nothing. The queue is bounded: a turn offered while it is full is
dropped and counted (``agent_memory_writes_dropped``), not queued without end. On shutdown the turns
queued are written within a bound (``drain_s``), then the rest are dropped and counted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from prometheus_client import Counter

from agent_service.memory.store import Owner
from shared.cancel_safety import stop_loop

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Turn:
    owner: Owner
    user_message: str
    answer: str
    session_id: str | None


class RememberQueue:
    def __init__(self, write: Callable[[Turn], Awaitable[None]], *, size: int, dropped: Counter) -> None:
        self._write = write
        self._queue: asyncio.Queue[Turn] = asyncio.Queue(maxsize=size)
        self._dropped = dropped
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    def start(self) -> None:
        self._task = asyncio.create_task(self._drain(), name="agent-memory-writer")

    def offer(self, turn: Turn) -> bool:
        """Queue ``turn`` for writing; False (dropped, counted) when the queue is full or closed."""
        if self._stop.is_set():
            self._dropped.labels("shutdown").inc()
            return False
        try:
            self._queue.put_nowait(turn)
        except asyncio.QueueFull:
            self._dropped.labels("queue_full").inc()
            return False
        return True

    async def _drain(self) -> None:
        # Stops once asked to and the queue is empty: a shutdown writes what was queued first.
        while not (self._stop.is_set() and self._queue.empty()):
            if self._queue.empty():
                getting = asyncio.ensure_future(self._queue.get())
                stopping = asyncio.ensure_future(self._stop.wait())
                await asyncio.wait((getting, stopping), return_when=asyncio.FIRST_COMPLETED)
                stopping.cancel()
                if not getting.done():
                    getting.cancel()
                    continue
                turn = getting.result()
            else:
                turn = self._queue.get_nowait()
            try:
                await self._write(turn)
            except Exception:
                log.exception("a turn could not be remembered")
            finally:
                self._queue.task_done()

    async def idle(self) -> None:
        """Return once every turn offered so far has been written (or given up on)."""
        await self._queue.join()

    async def aclose(self, drain_s: float) -> None:
        """Write what is queued within ``drain_s``; what is left is dropped and counted."""
        if self._task is None:
            return
        await stop_loop(self._task, self._stop, drain_s)
        self._task = None
        left = self._queue.qsize()
        if left:
            self._dropped.labels("shutdown").inc(left)
            log.warning("turns not remembered on shutdown", extra={"count": left})
