"""Hand-offs that run in the producer's own step: ``start_eagerly`` and ``Handoff``.

Streaming is a chain of hand-offs (model delta -> SSE bytes; SSE event -> WebSocket frame). With
a queue and a consumer task per hand-off, every item waits for the consumer to be scheduled, which
is behind every other ready task on the loop: under load, one full pass of the loop per hop. Most
of the time the consumer is idle and its work never has to wait (a socket write with room in the
buffer), so that wait is pure overhead.

``start_eagerly`` (and ``run_now``, which also returns the result) runs a coroutine right away, in
the caller's step, up to its first real suspension (what Python 3.12's eager tasks do; this module
uses them where they exist): it also tells whether a result was ready without waiting.
``Handoff`` builds on it: one consumer, items in order, the consumer runs inline while it is idle
and items queue (bounded) only while it is suspended, e.g. on a client that reads slowly. So the
fast path costs no task switch and a slow consumer still never blocks the producer.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import time
from asyncio.tasks import _enter_task, _leave_task  # what 3.12's eager start does, for 3.11
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

T = TypeVar("T")

__all__ = ["FairShare", "Handoff", "run_now", "start_eagerly"]

_NATIVE_EAGER = sys.version_info >= (3, 12)


def run_now(coro: Coroutine[Any, Any, T], *, name: str | None = None) -> tuple[bool, Any]:
    """Run ``coro`` now, until it finishes or first waits for something not ready yet.

    Returns ``(True, its result)`` when it finished in this call (an exception it raised is raised
    here), else ``(False, the task that carries it on from where it waits)``. Must be called with a
    running loop.
    """
    loop = asyncio.get_running_loop()
    if _NATIVE_EAGER:
        task = asyncio.Task(coro, loop=loop, name=name, eager_start=True)  # type: ignore[call-arg]
        if task.done():
            return True, task.result()  # re-raises, and marks the exception retrieved
        return False, task
    # Python 3.11: step the coroutine by hand, in its own context and as its own task, as 3.12's
    # eager start does: the task exists before the first step and is the running task during it,
    # so code that binds to the running task (asyncio.timeout, anyio's cancel scopes in httpx)
    # enters and exits in the same task when the coroutine goes on. The task's own first step
    # resumes it exactly as asyncio.Task would (same future protocol), or does nothing if it is done.
    context = contextvars.copy_context()
    step = _Step()
    task = loop.create_task(_carry_on(coro, step), name=name, context=context)
    task.add_done_callback(step.close_if_abandoned)
    caller = asyncio.current_task(loop)
    if caller is not None:
        _leave_task(loop, caller)
    _enter_task(loop, task)
    try:
        step.awaited = context.run(coro.send, None)
    except StopIteration as stop:
        step.coro = None
        return True, stop.value
    except BaseException:
        step.coro = None
        raise
    finally:
        _leave_task(loop, task)
        if caller is not None:
            _enter_task(loop, caller)
    step.coro = coro
    return False, task


def start_eagerly(coro: Coroutine[Any, Any, Any], *, name: str | None = None) -> asyncio.Task[Any] | None:
    """``run_now`` for a coroutine whose result nobody needs: None when it finished in this call,
    else the task that carries it on."""
    done, task = run_now(coro, name=name)
    return None if done else task


class _Step:
    """A coroutine started by ``run_now`` on Python 3.11: what it waits on, and itself while its
    task has yet to finish it."""

    __slots__ = ("awaited", "coro")

    def __init__(self) -> None:
        self.awaited: Any = None
        self.coro: Coroutine[Any, Any, Any] | None = None

    def close_if_abandoned(self, _task: asyncio.Task[Any]) -> None:
        # A task cancelled before its first step never ran ``_carry_on``: close the coroutine so
        # its finally blocks run instead of it lingering half-done.
        if self.coro is not None:
            coro, self.coro = self.coro, None
            coro.close()


async def _carry_on(coro: Coroutine[Any, Any, Any], step: _Step) -> Any:
    if step.coro is None:
        return None  # it finished (or failed) in the eager step: the caller has its outcome
    awaited = step.awaited
    try:
        while True:
            cancelled = False
            if awaited is None:
                # A bare ``yield`` (asyncio.sleep(0)): give the loop one pass.
                try:
                    await asyncio.sleep(0)
                except asyncio.CancelledError:
                    cancelled = True
            else:
                # ``awaited`` is the asyncio future the coroutine is suspended on (the protocol
                # asyncio.Task follows): wait for it without taking its result, which the coroutine
                # reads itself once resumed.
                awaited._asyncio_future_blocking = False
                try:
                    await asyncio.wait((awaited,))
                except asyncio.CancelledError:
                    cancelled = True
                    if not awaited.done():
                        # As Task.cancel does: cancel what it waits on; resumed, it sees CancelledError.
                        awaited.cancel()
                        cancelled = False
            try:
                awaited = coro.throw(asyncio.CancelledError()) if cancelled else coro.send(None)
            except StopIteration as stop:
                return stop.value
    finally:
        step.coro = None


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


class FairShare:
    """Lets the loop go round once the caller has kept it for ``budget_s`` without a wait.

    A producer working through a burst (many model deltas or agent events from one network read)
    never waits on its own: with its hand-offs running inline, it would hold the loop for the
    whole burst while other streams' first events and new requests queue behind it. Calling
    ``checkpoint`` after each item bounds that hold. Items already handed over are written by
    then, so the pause delays none of them.
    """

    def __init__(self, budget_s: float = 0.001) -> None:
        self._budget = budget_s
        self._since = time.perf_counter()

    async def checkpoint(self) -> None:
        now = time.perf_counter()
        if now - self._since >= self._budget:
            await asyncio.sleep(0)
            self._since = time.perf_counter()
