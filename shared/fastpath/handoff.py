"""``Handoff``: items for one consumer, run inline in the producer's step while the consumer is idle.

With a queue and a consumer task per hop (model delta -> SSE bytes -> WebSocket frame), every item
waits behind every other ready task on the loop, though the consumer is mostly idle and its write
would not wait. Items queue (bounded) only while the consumer is suspended, e.g. on a slow client.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from shared.fastpath.eager import start_eagerly

T = TypeVar("T")

__all__ = ["Handoff"]


class Handoff(Generic[T]):
    """Items for one consumer, handled in order and in batches.

    ``consume(batch)`` gets every item queued since its last call. While the consumer is idle,
    ``offer`` runs it in the caller's step; once a call suspends, it goes on in a task and later
    items wait in a queue of at most ``maxsize`` until it returns. An exception from ``consume``
    ends the hand-off: ``error`` holds it, ``on_error`` hears of it, later offers are refused.
    """

    def __init__(
        self, consume: Callable[[list[T]], Awaitable[None]], *, maxsize: int, name: str = "handoff",
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self._consume = consume
        self._maxsize = maxsize
        self._name = name
        self._on_error = on_error
        self._items: deque[T] = deque()
        self._running = False
        self._task: asyncio.Task[Any] | None = None
        # Set while no consume call is under way.
        self.idle = asyncio.Event()
        self.idle.set()
        self._room: asyncio.Event | None = None
        self.error: BaseException | None = None
        self.closed = False

    def __len__(self) -> int:
        return len(self._items)

    @property
    def busy(self) -> bool:
        """True while a ``consume`` call is under way (items offered now wait for it)."""
        return self._running

    def offer(self, item: T) -> bool:
        """Hand ``item`` over without waiting; False when it cannot be taken: the hand-off ended,
        or ``maxsize`` items already wait for a consumer that is stuck."""
        if self.closed or self.error is not None:
            return False
        if self._running:
            if len(self._items) >= self._maxsize:
                return False
            self._items.append(item)
            return True
        self._start([item])
        return True

    async def put(self, item: T) -> None:
        """Hand ``item`` over, waiting while the queue is full (back-pressure on the producer).
        Raises the consumer's error, or RuntimeError once closed."""
        while True:
            if self.error is not None:
                raise self.error
            if self.closed:
                raise RuntimeError(f"{self._name} is closed")
            if self.offer(item):
                return
            if self._room is None:
                self._room = asyncio.Event()
            self._room.clear()
            await self._room.wait()

    async def wait_idle(self) -> None:
        """Return once every item offered so far is consumed (or the hand-off ended)."""
        while self._running and not self.closed and self.error is None:
            await self.idle.wait()

    def close(self) -> None:
        """Refuse further items and stop a consume call under way; queued items are dropped."""
        self.closed = True
        self._items.clear()
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._wake()

    def _wake(self) -> None:
        if self._room is not None:
            self._room.set()
        if not self._running:
            self.idle.set()

    def _start(self, batch: list[T]) -> None:
        self._running = True
        self.idle.clear()
        try:
            task = start_eagerly(self._drain(batch), name=self._name)
        except BaseException:  # _drain handles its own errors; anything here is a bug upstream
            self._running = False
            self.idle.set()
            raise
        if task is not None and self._running:
            self._task = task

    async def _drain(self, batch: list[T]) -> None:
        try:
            while batch:
                await self._consume(batch)
                batch = list(self._items)
                self._items.clear()
                if self._room is not None:
                    self._room.set()
        except asyncio.CancelledError:
            pass  # closed
        except Exception as exc:  # noqa: BLE001 - reported to the owner, which ends the stream
            self.error = exc
            self._items.clear()
            if self._on_error is not None:
                self._on_error(exc)
        finally:
            self._running = False
            self._task = None
            self._wake()
