"""``TaskSupervisor``: on a graceful stop, replies under way get what is left of the grace period;
otherwise (and past it) they are cancelled at once."""

from __future__ import annotations

import asyncio
import time

from conversation_service.tasks import TaskSupervisor
from shared.serving import Shutdown


async def test_on_a_graceful_stop_a_task_under_way_finishes_within_the_grace_period() -> None:
    shutdown = Shutdown(grace_s=5.0)
    tasks = TaskSupervisor(shutdown)
    release = asyncio.Event()
    finished: list[str] = []

    async def reply() -> None:
        await release.wait()
        finished.append("reply")

    tasks.spawn(reply(), name="reply")
    shutdown.begin()
    closing = asyncio.create_task(tasks.close())
    await asyncio.sleep(0)
    assert not closing.done()  # waiting for the reply, not cancelling it
    release.set()
    await asyncio.wait_for(closing, 5)
    assert finished == ["reply"]


async def test_a_task_longer_than_the_grace_period_is_cancelled_when_it_is_over() -> None:
    shutdown = Shutdown(grace_s=0.2)
    tasks = TaskSupervisor(shutdown)
    never = asyncio.Event()
    task = tasks.spawn(never.wait(), name="endless")
    shutdown.begin()
    started = time.monotonic()
    await asyncio.wait_for(tasks.close(), 5)
    assert task.cancelled()
    assert 0.15 <= time.monotonic() - started < 2


async def test_without_a_graceful_stop_tasks_are_cancelled_at_once() -> None:
    tasks = TaskSupervisor(Shutdown(grace_s=30.0))
    never = asyncio.Event()
    task = tasks.spawn(never.wait(), name="endless")
    await asyncio.wait_for(tasks.close(), 1)
    assert task.cancelled()
