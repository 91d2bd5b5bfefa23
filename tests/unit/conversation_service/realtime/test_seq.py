"""InProcessSeqAllocator keeps a bounded number of counters and loses no seq when it drops one."""

from __future__ import annotations

import pytest

from conversation_service.realtime.seq import InProcessSeqAllocator


class Floors:
    """What the database and writer would report: the highest seq handed out per conversation."""

    def __init__(self) -> None:
        self.highest: dict[str, int] = {}
        self.loads = 0

    async def __call__(self, conversation_id: str) -> int:
        self.loads += 1
        return self.highest.get(conversation_id, 0)


async def _next(allocator: InProcessSeqAllocator, floors: Floors, conversation_id: str) -> int:
    seq = await allocator.next(conversation_id)
    floors.highest[conversation_id] = seq  # the frame is persisted or pending from here on
    return seq


async def test_counters_stay_bounded_over_many_conversations() -> None:
    floors = Floors()
    allocator = InProcessSeqAllocator(floors, max_conversations=50)
    for i in range(1000):
        assert await _next(allocator, floors, f"c{i}") == 1
    assert len(allocator) == 50


async def test_a_dropped_counter_resumes_where_it_stopped() -> None:
    floors = Floors()
    allocator = InProcessSeqAllocator(floors, max_conversations=2)
    assert [await _next(allocator, floors, "a") for _ in range(3)] == [1, 2, 3]
    await _next(allocator, floors, "b")
    await _next(allocator, floors, "c")  # drops "a", the least recently used
    loads = floors.loads
    assert await _next(allocator, floors, "a") == 4
    assert floors.loads == loads + 1  # reloaded from the floor, not restarted at 1
    assert await allocator.current("a") == 4


async def test_recently_used_counters_are_kept() -> None:
    floors = Floors()
    allocator = InProcessSeqAllocator(floors, max_conversations=2)
    await _next(allocator, floors, "a")
    await _next(allocator, floors, "b")
    await _next(allocator, floors, "a")  # "b" is now the least recently used
    await _next(allocator, floors, "c")
    loads = floors.loads
    assert await _next(allocator, floors, "a") == 3
    assert floors.loads == loads


def test_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        InProcessSeqAllocator(Floors(), max_conversations=0)
