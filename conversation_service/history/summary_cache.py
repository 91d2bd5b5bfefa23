"""Where compressed history summaries are kept between extractions: an interface, an in-process
implementation and (``repository.py``) one on the ``conversation_summaries`` table."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class CachedSummary:
    """The summary of a conversation's messages up to and including ``last_covered_message_id``."""

    conversation_id: str
    summary: str
    last_covered_message_id: str
    covered_message_count: int
    token_count: int
    updated_at: datetime


@runtime_checkable
class SummaryCache(Protocol):
    async def get(self, conversation_id: str) -> CachedSummary | None: ...

    async def put(self, entry: CachedSummary) -> None: ...  # insert or replace


class InMemorySummaryCache:
    """Per process, bounded (least recently used entries go first). For one replica or tests."""

    def __init__(self, max_entries: int = 10_000) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._max = max_entries
        self._entries: OrderedDict[str, CachedSummary] = OrderedDict()

    async def get(self, conversation_id: str) -> CachedSummary | None:
        entry = self._entries.get(conversation_id)
        if entry is not None:
            self._entries.move_to_end(conversation_id)
        return entry

    async def put(self, entry: CachedSummary) -> None:
        self._entries[entry.conversation_id] = entry
        self._entries.move_to_end(entry.conversation_id)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)
