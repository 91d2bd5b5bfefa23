"""``TokenCounter``: large uncounted histories are tokenized in a worker thread, small ones on the
loop, and ``HISTORY_OFFLOAD_CHARS=0`` keeps every count on the loop (no worker thread at all)."""

from __future__ import annotations

import threading

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
