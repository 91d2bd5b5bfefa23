"""Run a coroutine in the caller's own step, up to its first real suspension: ``start_eagerly`` and
``run_now``, Python 3.12's eager tasks with a faithful stand-in on 3.11. A hand-off whose consumer
is idle then costs no task switch (see ``handoff``).
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from asyncio.tasks import _enter_task, _leave_task  # what 3.12's eager start does, for 3.11
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["run_now", "start_eagerly"]

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
    # Only a coroutine left suspended can be abandoned. Added now rather than with the task, the
    # many that finish in the eager step (a hand-off's write) do not pay for a callback scheduled
    # when their task ends (0.9 of 3.7 us per call); the task cannot have ended yet.
    task.add_done_callback(step.close_if_abandoned)
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
