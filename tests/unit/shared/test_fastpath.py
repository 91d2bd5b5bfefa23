"""``start_eagerly`` runs a coroutine in the caller's step until it waits; ``Handoff`` consumes
inline while idle, queues (bounded, in order) while its consumer is suspended."""

from __future__ import annotations

import asyncio
import contextvars
from datetime import UTC, datetime

import pytest
from pydantic import BaseModel, ConfigDict, PrivateAttr

from shared.fastpath.eager import run_now, start_eagerly
from shared.fastpath.fair_share import FairShare, fair_share
from shared.fastpath.handoff import Handoff
from shared.fastpath.prevalidated import prevalidated
from shared.protocol import EventEnvelope, EventType
from shared.sse import encode_envelope

_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("_VAR", default="caller")


async def test_a_coroutine_that_never_waits_finishes_inside_the_call() -> None:
    ran: list[str] = []

    async def work() -> None:
        ran.append("done")

    assert start_eagerly(work()) is None
    assert ran == ["done"]


async def test_an_exception_before_the_first_wait_is_raised_to_the_caller() -> None:
    async def work() -> None:
        raise ValueError("bad")

    with pytest.raises(ValueError, match="bad"):
        start_eagerly(work())


async def test_a_coroutine_that_waits_goes_on_in_a_task_with_the_awaited_result() -> None:
    gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    steps: list[object] = []

    async def work() -> int:
        steps.append("before")
        value = await gate
        steps.append(value)
        await asyncio.sleep(0)  # a bare yield on the way
        steps.append("after")
        return value * 2

    task = start_eagerly(work())
    assert steps == ["before"] and task is not None and not task.done()
    gate.set_result(21)
    assert await task == 42
    assert steps == ["before", 21, "after"]


async def test_an_exception_after_a_wait_reaches_the_coroutine_and_the_task() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    seen: list[str] = []

    async def work() -> None:
        try:
            await gate
        except KeyError:
            seen.append("caught")
            raise

    task = start_eagerly(work())
    gate.set_exception(KeyError("k"))
    with pytest.raises(KeyError):
        await task
    assert seen == ["caught"]


async def test_cancelling_the_task_cancels_what_the_coroutine_waits_on() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    seen: list[str] = []

    async def work() -> None:
        try:
            await gate
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    task = start_eagerly(work())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gate.cancelled() and seen == ["cancelled"]


async def test_context_changes_stay_in_the_coroutine() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    seen: list[str] = []

    async def work() -> None:
        _VAR.set("coroutine")
        await gate
        seen.append(_VAR.get())

    task = start_eagerly(work())
    assert _VAR.get() == "caller"
    gate.set_result(None)
    await task
    assert seen == ["coroutine"]


class _Consumer:
    """Records batches; blocks on ``gate`` while it is set to a pending future."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.gate: asyncio.Future[None] | None = None
        self.fail_on: int | None = None

    async def __call__(self, batch: list[int]) -> None:
        if self.fail_on is not None and self.fail_on in batch:
            raise RuntimeError("consumer failed")
        self.batches.append(list(batch))
        if self.gate is not None:
            await self.gate


async def test_an_idle_consumer_takes_each_item_in_the_producers_step() -> None:
    consumer = _Consumer()
    handoff: Handoff[int] = Handoff(consumer, maxsize=4)
    for item in range(3):
        assert handoff.offer(item)
        assert consumer.batches[-1] == [item]  # already consumed: no loop pass in between
    assert not handoff.busy


async def test_items_offered_while_the_consumer_waits_come_next_as_one_batch_in_order() -> None:
    consumer = _Consumer()
    handoff: Handoff[int] = Handoff(consumer, maxsize=4)
    consumer.gate = asyncio.get_running_loop().create_future()
    handoff.offer(1)
    assert handoff.busy
    for item in (2, 3, 4):
        assert handoff.offer(item)
    gate, consumer.gate = consumer.gate, None
    gate.set_result(None)
    await handoff.wait_idle()
    assert consumer.batches == [[1], [2, 3, 4]]


async def test_a_stuck_consumer_never_blocks_offer_which_refuses_past_maxsize() -> None:
    consumer = _Consumer()
    handoff: Handoff[int] = Handoff(consumer, maxsize=2)
    consumer.gate = asyncio.get_running_loop().create_future()
    assert handoff.offer(1)
    assert handoff.offer(2) and handoff.offer(3)
    assert not handoff.offer(4)
    handoff.close()
    assert not handoff.offer(5)
    await handoff.wait_idle()
    assert consumer.batches == [[1]]


async def test_put_waits_for_room_and_keeps_the_order() -> None:
    consumer = _Consumer()
    handoff: Handoff[int] = Handoff(consumer, maxsize=1)
    consumer.gate = asyncio.get_running_loop().create_future()
    await handoff.put(1)
    await handoff.put(2)
    producer = asyncio.create_task(handoff.put(3))
    await asyncio.sleep(0)
    assert not producer.done()  # full: the producer waits
    gate, consumer.gate = consumer.gate, None
    gate.set_result(None)
    await producer
    await handoff.wait_idle()
    assert [item for batch in consumer.batches for item in batch] == [1, 2, 3]


async def test_a_consumer_error_ends_the_handoff_and_is_reported() -> None:
    consumer = _Consumer()
    errors: list[BaseException] = []
    handoff: Handoff[int] = Handoff(consumer, maxsize=4, on_error=errors.append)
    consumer.fail_on = 2
    assert handoff.offer(1)
    assert handoff.offer(2)
    assert isinstance(handoff.error, RuntimeError) and errors == [handoff.error]
    assert not handoff.offer(3)
    with pytest.raises(RuntimeError, match="consumer failed"):
        await handoff.put(4)
    assert consumer.batches == [[1]]


async def test_fair_share_lets_the_loop_go_round_only_once_its_budget_is_spent() -> None:
    other_ran: list[int] = []
    asyncio.get_running_loop().call_soon(other_ran.append, 1)
    share = FairShare(budget_s=3600)
    await share.checkpoint()
    assert other_ran == []  # within its budget: no pass of the loop
    share = FairShare(budget_s=0)
    await share.checkpoint()
    assert other_ran == [1]  # budget spent: the ready callback ran


async def test_a_fair_stream_yields_every_item_and_pauses_only_between_items_past_its_budget() -> None:
    async def items():
        for i in range(3):
            yield i

    other_ran: list[int] = []
    loop = asyncio.get_running_loop()
    seen = []
    async for item in fair_share(items(), budget_s=3600):
        loop.call_soon(other_ran.append, item)
        seen.append(item)
    assert seen == [0, 1, 2]
    assert other_ran == []  # within its budget the reader never gave the loop a pass

    seen, paced = [], []
    async for item in fair_share(items(), budget_s=0):
        loop.call_soon(paced.append, item)
        seen.append(item)
        assert paced == list(range(item))  # the pause comes before the next item, not before this one
    assert seen == [0, 1, 2]


async def test_run_now_returns_a_ready_result_or_the_task_that_waits_for_it() -> None:
    async def ready() -> int:
        return 7

    assert run_now(ready()) == (True, 7)
    gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def waiting() -> int:
        return await gate

    done, task = run_now(waiting())
    assert not done
    gate.set_result(8)
    assert await task == 8


async def test_the_coroutine_runs_as_one_task_before_and_after_its_first_wait() -> None:
    """Code bound to the running task (asyncio.timeout, anyio's cancel scopes) may be entered in
    the eager step and left after the wait."""
    caller = asyncio.current_task()
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    tasks: list[asyncio.Task | None] = []

    async def work() -> str:
        tasks.append(asyncio.current_task())
        async with asyncio.timeout(60):
            await gate
        tasks.append(asyncio.current_task())
        return "done"

    done, task = run_now(work())
    assert not done and asyncio.current_task() is caller
    gate.set_result(None)
    assert await task == "done"
    assert tasks == [task, task] and task is not caller


async def test_a_task_cancelled_before_it_resumes_the_coroutine_still_unwinds_it() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    unwound: list[str] = []

    async def work() -> None:
        try:
            await gate
        finally:
            unwound.append("finally")

    _, task = run_now(work())
    task.cancel()  # before the loop ran the task's first step
    with pytest.raises(asyncio.CancelledError):
        await task
    assert unwound == ["finally"]


# --- prevalidated ------------------------------------------------------------------------------


def test_prevalidated_envelope_is_what_validation_gives() -> None:
    values = ("s1", "r1", 7, EventType.ANSWER_CHUNK, datetime(2026, 11, 24, 6, 0, tzinfo=UTC), {"text": "hé"})
    built = prevalidated(EventEnvelope)(*values)
    validated = EventEnvelope(**dict(zip(EventEnvelope.model_fields, values)))
    assert built == validated
    assert repr(built) == repr(validated)
    assert built.model_fields_set == validated.model_fields_set
    assert built.model_dump_json() == validated.model_dump_json()
    assert encode_envelope(built) == encode_envelope(validated)
    assert built.is_terminal is False and built.payload().text == "hé"


def test_prevalidated_refuses_a_missing_field_and_models_it_cannot_build() -> None:
    with pytest.raises(TypeError, match="every field"):
        prevalidated(EventEnvelope)("s1", "r1", 7)

    class WithPrivate(BaseModel):
        a: int
        _b: int = PrivateAttr(0)

    class WithExtra(BaseModel):
        model_config = ConfigDict(extra="allow")
        a: int

    for cls in (WithPrivate, WithExtra):
        with pytest.raises(TypeError, match="not a plain model"):
            prevalidated(cls)
