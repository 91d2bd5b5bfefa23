"""Token counts of history messages: cached per message, computed off the event loop when large.

Tokenizing is CPU work (about 20 ms for 1,000 ordinary messages), so a batch with many uncached
characters is counted in a worker thread; counts are remembered per (message id, role, content)
so a conversation's history is tokenized once, not on every turn.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from conversation_service.settings.history import HistorySettings
from shared.protocol import Role
from shared.tokens import count_message_tokens, get_encoding


@dataclass(frozen=True, slots=True)
class HistoryItem:
    """A record after role mapping: what may be sent to the agent."""

    id: str
    role: Role
    content: str
    truncated: bool = False

    @property
    def cache_key(self) -> tuple[str, str, int, int]:
        # The content's hash and length guard against an edited message reusing a stale count.
        return (self.id, self.role.value, len(self.content), hash(self.content))


class TokenCounter:
    def __init__(self, settings: HistorySettings) -> None:
        self.encoding = settings.encoding
        self._cache_size = settings.token_cache_size
        self._offload_chars = settings.offload_chars
        self._cache: OrderedDict[tuple[str, str, int, int], int] = OrderedDict()
        # The vocabulary is loaded now (tens of ms), with the service, not inside the first turn
        # that has a history to count.
        get_encoding(self.encoding)

    def __len__(self) -> int:
        """How many messages' counts are remembered."""
        return len(self._cache)

    def count_text(self, role: Role, content: str) -> int:
        return count_message_tokens(role.value, content, self.encoding)

    def _offloads(self, chars: int) -> bool:
        return chars >= self._offload_chars > 0  # 0: never (counted on the loop, no worker thread)

    async def count_one(self, role: Role, content: str) -> int:
        if self._offloads(len(content)):
            return await asyncio.to_thread(self.count_text, role, content)
        return self.count_text(role, content)

    async def counts(self, items: Sequence[HistoryItem]) -> list[int]:
        """Token cost of each item (chat framing included), in order."""
        out: list[int | None] = []
        for item in items:
            cached = self._cache.get(item.cache_key)
            if cached is not None:
                self._cache.move_to_end(item.cache_key)
            out.append(cached)
        missing = [index for index, value in enumerate(out) if value is None]
        if missing:
            todo = [(items[i].role, items[i].content) for i in missing]
            if self._offloads(sum(len(content) for _, content in todo)):
                fresh = await asyncio.to_thread(self._count_batch, todo)
            else:
                fresh = self._count_batch(todo)
            for index, value in zip(missing, fresh):
                out[index] = value
                self._remember(items[index].cache_key, value)
        return out  # type: ignore[return-value]

    def _count_batch(self, todo: list[tuple[Role, str]]) -> list[int]:
        return [self.count_text(role, content) for role, content in todo]

    def _remember(self, key: tuple[str, str, int, int], value: int) -> None:
        if self._cache_size <= 0:
            return
        self._cache[key] = value
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
