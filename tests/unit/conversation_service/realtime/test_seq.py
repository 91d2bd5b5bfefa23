"""InProcessSeqAllocator counts through durably reserved blocks: bounded memory, and no seq is
ever handed out twice, whether a counter was dropped, the process died, or it closed cleanly."""

from __future__ import annotations

import pytest

from conversation_service.realtime.seq import InProcessSeqAllocator


class Reservations:
    """What ``conversations.seq_reserved`` does, per conversation (the SQL is tested against both
    databases in tests/integration/conversation_service/test_seq_reservations.py)."""

    def __init__(self) -> None:
        self.value: dict[str, int] = {}
        self.writes = 0

    async def take_block(self, conversation_id: str, *, above: int, block: int) -> int:
        self.writes += 1
        self.value[conversation_id] = max(self.value.get(conversation_id, 0), above) + block
        return self.value[conversation_id]

    async def cover(self, conversation_id: str, seq: int, *, block: int) -> int:
        raise AssertionError("the in-process allocator takes whole blocks")

    async def reserved(self, conversation_id: str) -> int:
        return self.value.get(conversation_id, 0)

    async def release(self, unused: dict[str, tuple[int, int]]) -> None:
        self.writes += 1
        for conversation_id, (last, limit) in unused.items():
            if self.value.get(conversation_id) == limit:
                self.value[conversation_id] = last


async def _floor(conversation_id: str) -> int:
    return 0


async def test_counters_stay_bounded_over_many_conversations() -> None:
    allocator = InProcessSeqAllocator(_floor, Reservations(), block=10, max_conversations=50)
    for i in range(1000):
        assert await allocator.next(f"c{i}") == 1
    assert len(allocator) == 50


async def test_one_reservation_write_per_block() -> None:
    reservations = Reservations()
    allocator = InProcessSeqAllocator(_floor, reservations, block=10)
    assert [await allocator.next("a") for _ in range(25)] == list(range(1, 26))
    assert reservations.writes == 3
    assert reservations.value["a"] == 30  # always at or above every seq handed out


async def test_a_dropped_counter_resumes_above_its_reservation() -> None:
    """Behaviour changed with durable reservations: a dropped counter no longer comes back at the
    exact value it had; the unused rest of its block is a hole, and no seq is reused."""
    reservations = Reservations()
    allocator = InProcessSeqAllocator(_floor, reservations, block=10, max_conversations=2)
    assert [await allocator.next("a") for _ in range(3)] == [1, 2, 3]
    await allocator.next("b")
    await allocator.next("c")  # drops "a", the least recently used
    assert await allocator.next("a") == 11
    assert await allocator.current("a") == 11


async def test_recently_used_counters_are_kept() -> None:
    reservations = Reservations()
    allocator = InProcessSeqAllocator(_floor, reservations, block=10, max_conversations=2)
    await allocator.next("a")
    await allocator.next("b")
    await allocator.next("a")  # "b" is now the least recently used
    await allocator.next("c")
    writes = reservations.writes
    assert await allocator.next("a") == 3
    assert reservations.writes == writes


async def test_after_a_crash_counting_restarts_above_the_reservation() -> None:
    reservations = Reservations()
    crashed = InProcessSeqAllocator(_floor, reservations, block=10)
    seen = [await crashed.next("a") for _ in range(4)]  # published, maybe never persisted
    restarted = InProcessSeqAllocator(_floor, reservations, block=10)  # the dead one never closed
    assert await restarted.next("a") == 11
    assert 11 > max(seen)


async def test_a_clean_close_hands_the_unused_seqs_back() -> None:
    reservations = Reservations()
    first = InProcessSeqAllocator(_floor, reservations, block=10)
    assert [await first.next("a") for _ in range(4)] == [1, 2, 3, 4]
    await first.close()
    assert reservations.value["a"] == 4
    second = InProcessSeqAllocator(_floor, reservations, block=10)
    assert await second.next("a") == 5


async def test_current_without_a_block_is_the_floor() -> None:
    async def floor(conversation_id: str) -> int:
        return 7

    allocator = InProcessSeqAllocator(floor, Reservations(), block=10)
    assert await allocator.current("a") == 7  # what exists; a replay never waits for reserved seqs


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        InProcessSeqAllocator(_floor, Reservations(), max_conversations=0)
    with pytest.raises(ValueError, match="at least 1"):
        InProcessSeqAllocator(_floor, Reservations(), block=0)
