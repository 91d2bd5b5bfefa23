"""Background work owned by the app: reply tasks started by a POST that answered 202 already
(``TaskSupervisor``), and jobs repeated while the app runs (``every``).

Tasks are tracked so shutdown can await and cancel them, and their failures are logged instead of
vanishing with an unretrieved exception. On a graceful stop (SIGTERM, ``shared.serving``) replies under
way get what is left of the grace period to finish; the rest are cancelled.

A reply holds its place among the replies this process runs at once (``turns.admission``) for as long
as its task runs: the first task spawned inside ``carrying(place)`` takes the place and gives it back
when it ends, however it ends. The routing code that starts a reply needs to know nothing of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from contextvars import ContextVar
from typing import Any, Protocol, Self

from shared.serving import Shutdown
from shared.transactions import is_unavailable

log = logging.getLogger(__name__)


class Place(Protocol):
    """What a reply's task holds while it runs (its admission ``shared.admission.Slot``)."""

    carried: bool

    def release(self) -> None: ...


# The place the next reply task spawned in this context takes (``TaskSupervisor.carrying``).
_carried: ContextVar[Place | None] = ContextVar("carried_place", default=None)


class TaskSupervisor:
    def __init__(self, shutdown: Shutdown | None = None) -> None:
        self._tasks: set[asyncio.Task] = set()
        self._closed = False
        self._shutdown = shutdown

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task:
        if self._closed:
            coro.close()
            raise RuntimeError("the service is shutting down")
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        place = _carried.get()
        if place is not None and not place.carried:
            place.carried = True
            task.add_done_callback(lambda _task: place.release())
        return task

    @contextlib.contextmanager
    def carrying(self, place: Place) -> Iterator[None]:
        """The first task spawned in the block (a reply's) holds ``place`` until it ends. The caller
        releases a place no task took (the message was not answered here after all)."""
        token = _carried.set(place)
        try:
            yield
        finally:
            _carried.reset(token)

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed", exc_info=task.exception(), extra={"task": task.get_name()})

    @property
    def running(self) -> int:
        return len(self._tasks)

    async def join(self) -> None:
        """Wait for the tasks running now (tests and graceful shutdown)."""
        while self._tasks:
            await asyncio.gather(*tuple(self._tasks), return_exceptions=True)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        self._closed = True
        if self._tasks and self._shutdown is not None and self._shutdown.begun.is_set():
            # A graceful stop: let replies under way finish within the grace period that is left.
            remaining = self._shutdown.remaining()
            log.info("waiting for replies under way", extra={"tasks": len(self._tasks), "grace_s": remaining})
            if remaining > 0:
                await asyncio.wait(tuple(self._tasks), timeout=remaining)
        if self._tasks:
            log.info("cancelling background tasks", extra={"tasks": len(self._tasks)})
        for task in tuple(self._tasks):
            task.cancel()
        await asyncio.gather(*tuple(self._tasks), return_exceptions=True)


@contextlib.asynccontextmanager
async def every(interval_s: float, job: Callable[[], Awaitable[object]], *, name: str) -> AsyncIterator[None]:
    """Run ``job`` now and then every ``interval_s`` in a background task until the block ends (which
    waits for a run under way). A failed run is logged; the next one comes on time. While the
    database is away (a restart) that is said once, not with a traceback on every run."""
    stop = asyncio.Event()

    async def loop() -> None:
        waiting_for_database = False
        while not stop.is_set():
            try:
                await job()
                if waiting_for_database:
                    log.info("background job runs again", extra={"task": name})
                waiting_for_database = False
            except Exception as exc:
                if not is_unavailable(exc):
                    log.exception("background job failed", extra={"task": name})
                elif not waiting_for_database:
                    waiting_for_database = True
                    log.warning("background job waits for the database", extra={
                        "task": name, "error_type": type(exc).__name__})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval_s)

    task = asyncio.create_task(loop(), name=name)
    try:
        yield
    finally:
        stop.set()
        await asyncio.gather(task, return_exceptions=True)
