"""``TokenCounter``: large uncounted histories are tokenized in a worker thread, small ones on the
loop, and ``HISTORY_OFFLOAD_CHARS=0`` keeps every count on the loop (no worker thread at all)."""

from __future__ import annotations

import gc
import threading
import tracemalloc
import uuid

import pytest

from conversation_service.history.tokens import HistoryItem, TokenCounter
from conversation_service.settings.history import HistorySettings
from shared.protocol import Role


class _WhereCounted(TokenCounter):
    """Records the thread each count ran on; the counting itself is the product's."""

    def __init__(self, settings: HistorySettings) -> None:
        super().__init__(settings)
        self.threads: list[int] = []

    def count_text(self, role: Role, content: str) -> int:
        self.threads.append(threading.get_ident())
        return super().count_text(role, content)


def _items(n: int, chars: int) -> list[HistoryItem]:
    return [HistoryItem(id=f"m{i}", role=Role.USER, content="word " * (chars // 5)) for i in range(n)]


@pytest.mark.parametrize(("offload_chars", "large_in_thread"), [(1_000, True), (0, False)])
async def test_where_counts_run(offload_chars: int, large_in_thread: bool) -> None:
    loop_thread = threading.get_ident()
    counter = _WhereCounted(HistorySettings(offload_chars=offload_chars))

    small = await counter.counts(_items(2, 100))  # 200 characters: under any threshold but 0's
    assert counter.threads == [loop_thread] * 2 and all(n > 0 for n in small)

    counter.threads.clear()
    large = _items(5, 400)  # 2 000 characters, uncached
    counts = await counter.counts(large)
    long_message = "word " * 400
    one = await counter.count_one(Role.USER, long_message)
    assert (counter.threads[0] != loop_thread) is large_in_thread
    assert (counter.threads[-1] != loop_thread) is large_in_thread
    # Where it ran changes nothing of the figures.
    assert counts == [counter.count_text(i.role, i.content) for i in large] and one == counter.count_text(Role.USER, long_message)

    counter.threads.clear()
    assert await counter.counts(large) == counts and counter.threads == []  # remembered


def _traced_after_gc() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def test_a_full_cache_holds_a_bounded_amount_of_memory() -> None:
    """The cache fills over a long load (one entry per message counted) and then stops growing:
    at its default size (10 000 messages) it holds under 4 MiB, and three times as many messages
    later it holds no more. This is the ConversationService's slow RSS rise in the first hour of
    the Locust scenario (docs/benchmarks-history.md), bounded. Measured once it has turned over twice: an
    OrderedDict that evicts keeps a larger table than one that only filled."""
    counter = TokenCounter(HistorySettings(offload_chars=0))
    size = HistorySettings().token_cache_size

    async def count(first: int, n: int) -> None:
        for start in range(first, first + n, 100):
            await counter.counts([
                HistoryItem(id=str(uuid.UUID(int=i)), role=Role.ASSISTANT, content=f"answer {i:08d} " * 20)
                for i in range(start, start + 100)
            ])

    was_tracing = tracemalloc.is_tracing()
    tracemalloc.start()
    try:
        before = _traced_after_gc()
        await count(0, 2 * size)
        full = _traced_after_gc() - before
        await count(2 * size, 2 * size)
        later = _traced_after_gc() - before
    finally:
        if not was_tracing:
            tracemalloc.stop()
    assert len(counter) == size
    assert full < 4 * 2**20, full
    assert later <= full * 1.01, (full, later)
