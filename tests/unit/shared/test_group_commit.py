from __future__ import annotations

import asyncio

import pytest

from shared.group_commit import GroupCommitter


class Recorder:
    def __init__(self, fail_times: int = 0) -> None:
        self.batches: list[list[int]] = []
        self.fail_times = fail_times
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def __call__(self, batch: list[int]) -> None:
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_times:
            self.fail_times -= 1
            raise RuntimeError("database down")
        self.batches.append(list(batch))


async def test_items_of_one_window_are_written_as_one_batch() -> None:
    write = Recorder()
    committer = GroupCommitter(write, interval_s=3600)
    committer.start()
    for i in range(5):
        committer.add(i)
    assert write.batches == []  # the window is still open
    await committer.flush()
    assert write.batches == [[0, 1, 2, 3, 4]]
    await committer.aclose()


async def test_a_window_closes_by_itself_after_the_interval() -> None:
    write = Recorder()
    committer = GroupCommitter(write, interval_s=0.01)
    committer.start()
    committer.add(1)
    assert await committer.wait_written(5.0)
    assert write.batches == [[1]]
    await committer.aclose()


async def test_a_capped_batch_leaves_the_rest_for_the_next_and_flush_waits_for_all() -> None:
    write = Recorder()
    committer = GroupCommitter(write, interval_s=3600, max_batch=2)
    committer.start()
    for i in range(5):
        committer.add(i)
    await committer.flush()
    assert write.batches == [[0, 1], [2, 3], [4]]
    await committer.aclose()


async def test_items_added_during_a_write_wait_for_the_next_window() -> None:
    # Under a steady stream items arrive during every write; going again at once made each
    # window one back-to-back commit of the few items of one write's duration.
    write = Recorder()
    write.gate = asyncio.Event()
    committer = GroupCommitter(write, interval_s=3600)
    committer.start()
    committer.add(1)
    committer.request_flush()
    await write.entered.wait()
    committer.add(2)
    write.gate.set()
    assert await committer.wait_written(5.0)
    assert not await committer.wait_written(0.2)  # the window of item 2 is still open
    assert write.batches == [[1]] and len(committer) == 1
    await committer.flush()
    assert write.batches == [[1], [2]]
    await committer.aclose()


async def test_put_waits_for_room_while_the_writer_is_behind() -> None:
    write = Recorder()
    committer = GroupCommitter(write, interval_s=0, max_pending=2)
    await committer.put(1)
    await committer.put(2)  # full, and nothing writes yet
    third = asyncio.create_task(committer.put(3))
    await asyncio.sleep(0)  # one pass: the third put reaches its wait
    assert not third.done() and len(committer) == 2
    committer.start()
    await third
    await committer.flush()
    assert [item for batch in write.batches for item in batch] == [1, 2, 3]
    await committer.aclose()


async def test_a_failed_write_is_written_again_before_anything_queued_after_it() -> None:
    write = Recorder(fail_times=3)
    committer = GroupCommitter(write, interval_s=3600, retry_for_s=30, retry_pauses_s=(0.01,))
    committer.start()
    committer.add(1)
    committer.request_flush()
    await write.entered.wait()
    committer.add(2)  # queued while the first batch is being retried
    await committer.flush()
    assert write.batches == [[1], [2]]  # nothing skipped, nothing out of order
    await committer.aclose()


async def test_a_batch_is_given_up_only_after_the_budget_and_its_owner_is_told() -> None:
    write = Recorder(fail_times=10_000)
    given_up: list[tuple[list[int], Exception]] = []
    committer = GroupCommitter(write, interval_s=3600, retry_for_s=0.3, retry_pauses_s=(0.02,),
                               on_given_up=lambda batch, exc: given_up.append((batch, exc)))
    committer.start()
    committer.add(1)
    started = asyncio.get_running_loop().time()
    with pytest.raises(RuntimeError, match="database down"):
        await committer.flush()
    assert asyncio.get_running_loop().time() - started >= 0.3
    assert [batch for batch, _ in given_up] == [[1]]
    # Still failing past the budget: the next batch is given up after one attempt, not another budget.
    committer.add(2)
    started, calls = asyncio.get_running_loop().time(), write.fail_times
    with pytest.raises(RuntimeError):
        await committer.flush()
    assert calls - write.fail_times == 1 and asyncio.get_running_loop().time() - started < 0.3
    # The database is back: batches are written again, and the budget starts afresh at the next failure.
    write.fail_times = 0
    committer.add(3)
    await committer.flush()
    assert write.batches == [[3]] and [batch for batch, _ in given_up] == [[1], [2]]
    await committer.aclose()


async def test_discarded_items_are_never_written_and_close_writes_the_rest() -> None:
    write = Recorder()
    committer = GroupCommitter(write, interval_s=3600)
    committer.start()
    for i in range(4):
        committer.add(i)
    committer.discard(lambda item: item % 2 == 0)
    await committer.aclose()
    assert write.batches == [[0, 2]]
