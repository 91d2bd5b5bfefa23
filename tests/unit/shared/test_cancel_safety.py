"""``RunToEnd``: a caller waits only so long, the work is never cancelled half-way and ends in the
background, and at most ``limit`` calls run late. ``stop_loop``: a loop finishes its pass first."""

from __future__ import annotations

import asyncio

import pytest

from shared.cancel_safety import CallCancelled, RunToEnd, Saturated, stop_loop


class Work:
    """A call that holds something (``holding``) until ``release`` is set, and always gives it back."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.took = asyncio.Event()
        self.holding = 0
        self.finished = 0

    async def __call__(self, value: str = "done") -> str:
        self.holding += 1
        self.took.set()
        try:
            await self.release.wait()
            self.finished += 1
            return value
        finally:
            self.holding -= 1


async def test_a_call_in_time_gives_its_result() -> None:
    work = Work()
    work.release.set()
    calls = RunToEnd("store", limit=2)
    assert await calls.call(work("answer"), timeout=1) == "answer"
    assert calls.late == 0


async def test_past_its_time_the_caller_goes_on_and_the_call_ends_in_the_background() -> None:
    work = Work()
    calls = RunToEnd("store", limit=2)
    with pytest.raises(TimeoutError):
        await calls.call(work(), timeout=0.01)
    assert work.holding == 1 and calls.late == 1, "not cancelled: it still holds what it took"
    work.release.set()
    await calls.aclose(grace_s=1)
    assert work.finished == 1 and work.holding == 0 and calls.late == 0


async def _calling(calls: RunToEnd, work: Work) -> asyncio.Task:
    """A caller waiting (10 s at most) for ``work``, which holds something by now."""
    caller = asyncio.create_task(calls.call(work(), timeout=10))
    await work.took.wait()
    return caller


async def test_a_cancelled_caller_leaves_the_call_running_to_its_end() -> None:
    work = Work()
    calls = RunToEnd("store", limit=2)
    caller = await _calling(calls, work)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert calls.late == 1 and work.holding == 1
    work.release.set()
    await calls.aclose(grace_s=1)
    assert work.finished == 1 and work.holding == 0


async def test_with_limit_calls_running_late_a_new_one_is_refused_without_starting() -> None:
    work = Work()
    calls = RunToEnd("store", limit=1)
    with pytest.raises(TimeoutError):
        await calls.call(work(), timeout=0.01)
    refused = work()
    with pytest.raises(Saturated):
        await calls.call(refused, timeout=1)
    assert work.holding == 1, "the refused call never ran"
    work.release.set()
    await calls.aclose(grace_s=1)
    assert await calls.call(work("again"), timeout=1) == "again", "room again once the late call ended"


async def test_on_close_late_calls_get_their_grace_then_are_cancelled() -> None:
    work = Work()
    calls = RunToEnd("store", limit=2)
    with pytest.raises(TimeoutError):
        await calls.call(work(), timeout=0.01)
    await calls.aclose(grace_s=0.05)
    assert work.holding == 0 and work.finished == 0 and calls.late == 0


async def test_a_failed_late_call_is_logged_not_raised(caplog) -> None:
    async def fails() -> None:
        await asyncio.sleep(0.05)
        raise OSError("store down")

    calls = RunToEnd("store", limit=1)
    with pytest.raises(TimeoutError):
        await calls.call(fails(), timeout=0.01)
    await calls.aclose(grace_s=1)
    assert any(r.getMessage() == "a late call failed" and r.error_type == "OSError" for r in caplog.records)


async def test_stop_loop_lets_the_pass_under_way_finish() -> None:
    stop = asyncio.Event()
    in_pass, passes = asyncio.Event(), []

    async def loop() -> None:
        while not stop.is_set():
            in_pass.set()
            await asyncio.sleep(0.05)  # a pass that holds a connection for a while
            passes.append("done")

    task = asyncio.create_task(loop())
    await in_pass.wait()
    await stop_loop(task, stop, grace_s=5)
    assert passes == ["done"] and task.done() and not task.cancelled()


async def test_stop_loop_cancels_a_pass_that_outlasts_the_grace() -> None:
    stop = asyncio.Event()
    started = asyncio.Event()

    async def stuck() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(stuck())
    await started.wait()
    await stop_loop(task, stop, grace_s=0.01)
    assert task.cancelled()


async def test_a_call_whose_own_task_is_cancelled_fails_without_cancelling_the_caller() -> None:
    work = Work()
    calls = RunToEnd("store", limit=1)
    caller = await _calling(calls, work)
    [inner] = [t for t in asyncio.all_tasks() if t.get_name() == "store"]
    inner.cancel()
    with pytest.raises(CallCancelled):
        await caller
    assert not caller.cancelled() and work.holding == 0
