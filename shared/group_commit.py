"""``GroupCommitter``: items written in batches, one transaction per batch, never one per token.

Both durable logs (the Agent Service's events, the ConversationService's frames) take items per
token. A batch closes ``interval_s`` after the writer is free and has an item, or at once when an
event boundary asks (``request_flush``/``flush``): under a steady stream, one transaction per
window. What a batch means for the database (which rows, retries, what a
failure loses) is the caller's ``write`` function; this class only decides when it runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["GroupCommitter"]

log = logging.getLogger(__name__)


class GroupCommitter(Generic[T]):
    def __init__(
        self, write: Callable[[list[T]], Awaitable[None]], *, interval_s: float,
        max_batch: int | None = None, max_pending: int | None = None, name: str = "group-commit",
    ) -> None:
        self._write = write
        self._interval = interval_s
        self._max_batch = max_batch
        self._max_pending = max_pending
        self._name = name
        self._pending: list[T] = []
        self._flush_waiters: list[asyncio.Future[None]] = []
        self._written = asyncio.Event()  # set after each batch, for ``wait_written``
        self._has_room = asyncio.Event()
        self._has_room.set()
        self._has_work = asyncio.Event()
        self._urgent = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def __len__(self) -> int:
        return len(self._pending)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=self._name)

    def add(self, item: T) -> None:
        self._pending.append(item)
        self._has_work.set()
        if self._max_pending is not None and len(self._pending) >= self._max_pending:
            self._has_room.clear()

    async def put(self, item: T) -> None:
        """``add``, once there is room: a database far behind slows producers down instead of
        growing memory."""
        while not self._has_room.is_set():
            await self._has_room.wait()
        self.add(item)

    def discard(self, keep: Callable[[T], bool]) -> None:
        """Keep only the queued items ``keep`` accepts (the others will never be written)."""
        self._pending = [item for item in self._pending if keep(item)]

    def request_flush(self) -> None:
        self._urgent.set()
        self._has_work.set()

    async def flush(self) -> None:
        """Return once everything added so far is written; raises what the write raised."""
        if self._task is None or self._task.done():
            await self._write_pending()  # not running (start-up or shut down): write inline
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._flush_waiters.append(waiter)
        self.request_flush()
        await waiter

    async def wait_written(self, timeout: float) -> bool:
        """Wait for the next written batch; False when none came within ``timeout``."""
        written = self._written
        try:
            await asyncio.wait_for(written.wait(), timeout)
            return True
        except TimeoutError:
            return False

    async def _loop(self) -> None:
        while True:
            await self._has_work.wait()
            if not self._urgent.is_set() and not self._closing:
                try:  # the group-commit window: more items join until it closes or a boundary asks
                    await asyncio.wait_for(self._urgent.wait(), self._interval)
                except TimeoutError:
                    pass
            self._has_work.clear()
            self._urgent.clear()
            # The cut: what is queued now is written now, in batches of at most ``max_batch``, and
            # every waiter so far added its items before it. Items added while those batches are
            # written wait for the next window (they set ``_has_work`` again): going again at once
            # would turn the window into back-to-back commits of a few items each under a steady
            # stream, one transaction per ~40 events instead of per window.
            waiters, self._flush_waiters = self._flush_waiters, []
            queued = len(self._pending)
            error: Exception | None = None
            while queued and error is None:
                size = queued if self._max_batch is None else min(queued, self._max_batch)
                error = await self._write_batch(size)
                queued -= size
            if self._pending:
                self._has_work.set()  # left after a failed batch, or added meanwhile: the next window
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(error) if error is not None else waiter.set_result(None)
            if self._closing and not self._pending:
                return

    async def _write_batch(self, size: int) -> Exception | None:
        batch, self._pending = self._pending[:size], self._pending[size:]
        if self._max_pending is None or len(self._pending) < self._max_pending:
            self._has_room.set()
        if not batch:
            return None
        try:
            await self._write(batch)
        except Exception as exc:  # the caller's write decided this batch is lost; its waiters learn it
            log.exception("batch could not be written", extra={"writer": self._name, "items": len(batch)})
            return exc
        finally:
            written, self._written = self._written, asyncio.Event()
            written.set()
        return None

    async def _write_pending(self) -> None:
        while self._pending:
            cut = len(self._pending) if self._max_batch is None else self._max_batch
            batch, self._pending = self._pending[:cut], self._pending[cut:]
            self._has_room.set()
            await self._write(batch)

    async def aclose(self) -> None:
        """Write what is queued, then stop."""
        self._closing = True
        self.request_flush()
        if self._task is not None:
            try:
                await self._task
            except Exception:
                log.exception("group-commit writer stopped with an error", extra={"writer": self._name})
        await self._write_pending()
