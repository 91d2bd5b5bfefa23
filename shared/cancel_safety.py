"""A timeout owns nothing (DESIGN §8): the two ways work that holds something is stopped here.

Cancelling a coroutine in the middle of database or network work can leave what it holds behind:
a pooled connection not checked in, SQLite's write turn, a row lock, a lease. So a caller that stops
waiting does not cancel such work; it uses one of these:

- ``RunToEnd.call(coro, timeout)``: the work runs in a task of its own and the caller waits for it up
  to ``timeout``. Past that (or when the caller is cancelled) the caller goes on with
  ``TimeoutError`` while the work runs to its end in the background, giving back what it holds as it
  would have. At most ``limit`` calls run late at once: a store that keeps them all busy is stuck,
  and a new call is refused at once (``Saturated``) rather than piling up tasks and connections.
- ``stop_loop(task, stop, grace_s)``: a background loop is asked to stop between passes (a pass may
  hold a connection) and given ``grace_s`` to finish the one under way; only then is it cancelled.

Work that holds nothing across its awaits (waiting on an event, a queue, a lock or a semaphore, a
socket read whose connection is closed by the cancellation) may be cancelled as usual.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = ["CallCancelled", "RunToEnd", "Saturated", "stop_loop"]


class Saturated(RuntimeError):
    """As many calls as allowed are still running late: this one was not started."""


class CallCancelled(RuntimeError):
    """The call's own task was cancelled (a shutdown): it failed; the caller was not cancelled."""


class RunToEnd:
    """Calls of one kind (``name``) that run to their end, whoever stops waiting for them."""

    def __init__(self, name: str, *, limit: int) -> None:
        if limit < 1:
            raise ValueError("the number of late calls must be at least 1")
        self.name = name
        self.limit = limit
        self._late: set[asyncio.Task[Any]] = set()

    @property
    def late(self) -> int:
        """Calls still running after their caller stopped waiting."""
        return len(self._late)

    async def call(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """``coro``'s result; ``TimeoutError`` when it takes longer than ``timeout`` (it goes on);
        ``Saturated`` (``coro`` not started) when ``limit`` calls are running late already."""
        if len(self._late) >= self.limit:
            coro.close()
            raise Saturated(f"{len(self._late)} {self.name} calls are still running late")
        task = asyncio.create_task(coro, name=self.name)
        try:
            done, _ = await asyncio.wait((task,), timeout=timeout)
        except asyncio.CancelledError:
            self._run_late(task)
            raise
        if not done:
            self._run_late(task)
            raise TimeoutError(f"{self.name} took longer than {timeout:g} s; it goes on in the background")
        if task.cancelled():
            raise CallCancelled(f"{self.name} was cancelled")
        return task.result()

    def _run_late(self, task: asyncio.Task[Any]) -> None:
        self._late.add(task)
        task.add_done_callback(self._ended_late)

    def _ended_late(self, task: asyncio.Task[Any]) -> None:
        self._late.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("a late call failed", extra={"call": self.name, "error_type": type(task.exception()).__name__})

    async def aclose(self, grace_s: float) -> None:
        """On shutdown, before what they use is closed: give the late calls ``grace_s`` to end,
        then cancel the rest and wait for them."""
        late = tuple(self._late)
        if not late:
            return
        _, pending = await asyncio.wait(late, timeout=grace_s)
        if pending:
            log.warning("late calls cancelled on shutdown", extra={"call": self.name, "count": len(pending)})
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)


async def stop_loop(task: asyncio.Task[Any], stop: asyncio.Event, grace_s: float) -> None:
    """Ask a loop to stop (``stop`` set; it checks between passes), give it ``grace_s`` to finish
    the pass under way, then cancel it; returns once it has ended."""
    stop.set()
    if not task.done():
        await asyncio.wait((task,), timeout=grace_s)
    if not task.done():
        log.warning("background loop cancelled mid-pass on shutdown", extra={"task": task.get_name()})
        task.cancel()
    await asyncio.gather(task, return_exceptions=True)
