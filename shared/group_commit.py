"""``GroupCommitter``: items written in batches, one transaction per batch, never one per token.

Both durable logs (the Agent Service's events, the ConversationService's frames) take items per
token. A batch closes ``interval_s`` after the writer is free and has an item, or at once when an
event boundary asks (``request_flush``/``flush``): under a steady stream, one transaction per
window. What a batch means for the database (which rows, in what transaction) is the caller's
``write`` function; this class decides when it runs, and what happens when it fails.

A durable write is never skipped: a batch whose write fails is written again, before anything
queued after it, with growing pauses, for ``retry_for_s`` (the database restarting, or away for a
while). Producers meanwhile queue behind it, bounded by ``max_pending`` (``put`` waits for room).
Only once the database has been failing for ``retry_for_s`` is a batch given up: ``on_given_up``
receives it (its owner must end what the lost items belonged to with an explicit error, never with
a success over the hole) and its flush waiters get the error. While the writes go on failing after
that, each batch is given up after one attempt, so memory and waits stay bounded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["GroupCommitter"]

log = logging.getLogger(__name__)

# Pauses between the attempts at a failed batch; the last one repeats until ``retry_for_s``.
RETRY_PAUSES_S = (0.05, 0.1, 0.2, 0.5, 1.0)
# How long a closing writer still retries a failing batch, whatever ``retry_for_s`` says.
CLOSE_RETRY_S = 5.0


class GroupCommitter(Generic[T]):
    def __init__(
        self, write: Callable[[list[T]], Awaitable[None]], *, interval_s: float,
        max_batch: int | None = None, max_pending: int | None = None, name: str = "group-commit",
        retry_for_s: float = 30.0, on_given_up: Callable[[list[T], Exception], None] | None = None,
        retry_pauses_s: tuple[float, ...] = RETRY_PAUSES_S,
    ) -> None:
        self._write = write
        self._interval = interval_s
        self._max_batch = max_batch
        self._max_pending = max_pending
        self._name = name
        self._retry_for = retry_for_s
        self._on_given_up = on_given_up
        self._pauses = retry_pauses_s
        # Since when the writes fail (None: the last one succeeded), and when a closing writer stops retrying.
        self._failing_since: float | None = None
        self._close_by: float | None = None
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

    def has_room(self) -> bool:
        return self._has_room.is_set()

    async def room(self) -> None:
        """Return once fewer than ``max_pending`` items wait (at once when there is room)."""
        while not self._has_room.is_set():
            await self._has_room.wait()

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
            while queued:
                size = queued if self._max_batch is None else min(queued, self._max_batch)
                error = await self._write_batch(size) or error
                queued -= size
            if self._pending:
                self._has_work.set()  # added meanwhile: the next window
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
            return await self._write_until_done(batch)
        finally:
            written, self._written = self._written, asyncio.Event()
            written.set()

    async def _write_until_done(self, batch: list[T]) -> Exception | None:
        """Write ``batch``, again and again while the database fails, within the retry budget; the
        error when it was given up."""
        attempt = 0
        while True:
            try:
                await self._write(batch)
            except Exception as exc:  # noqa: BLE001 - retried below, or given up and reported
                now = time.monotonic()
                if self._failing_since is None:
                    self._failing_since = now
                    log.warning("batch could not be written; retrying in order", extra={
                        "writer": self._name, "items": len(batch), "error_type": type(exc).__name__})
                deadline = self._failing_since + self._retry_for
                if self._close_by is not None:
                    deadline = min(deadline, self._close_by)
                if now >= deadline:
                    self._give_up(batch, exc)
                    return exc
                pause = self._pauses[min(attempt, len(self._pauses) - 1)]
                attempt += 1
                await asyncio.sleep(min(pause, max(deadline - now, 0.0)))
                continue
            if self._failing_since is not None:
                log.info("batches are written again", extra={
                    "writer": self._name, "failed_for_s": round(time.monotonic() - self._failing_since, 3)})
                self._failing_since = None
            return None

    def _give_up(self, batch: list[T], exc: Exception) -> None:
        log.error("batch given up: the database failed for longer than the retry budget",
                  exc_info=exc, extra={"writer": self._name, "items": len(batch)})
        if self._on_given_up is not None:
            try:
                self._on_given_up(batch, exc)
            except Exception:
                log.exception("the owner of a given-up batch failed to take it", extra={"writer": self._name})

    async def _write_pending(self) -> None:
        error: Exception | None = None
        while self._pending:
            cut = len(self._pending) if self._max_batch is None else self._max_batch
            batch, self._pending = self._pending[:cut], self._pending[cut:]
            self._has_room.set()
            error = await self._write_until_done(batch) or error
        if error is not None:
            raise error

    async def aclose(self) -> None:
        """Write what is queued, then stop (retrying a failing database for at most ``CLOSE_RETRY_S``)."""
        self._close_by = time.monotonic() + CLOSE_RETRY_S
        self._closing = True
        self.request_flush()
        if self._task is not None:
            try:
                await self._task
            except Exception:
                log.exception("group-commit writer stopped with an error", extra={"writer": self._name})
        await self._write_pending()
