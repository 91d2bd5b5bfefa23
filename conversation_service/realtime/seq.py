"""Per-conversation frame sequence numbers.

``InProcessSeqAllocator`` counts in memory, starting above the highest seq in the database.
``RedisSeqAllocator`` shares the counter between replicas with ``INCR``; a missing key (first use,
or Redis lost it) is initialised with ``SET NX`` from the database, so replicas racing to create
it agree on one starting point.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Awaitable, Callable

# Reads the highest seq known for a conversation (persisted frames and frames waiting in this
# process's writer).
FloorLoader = Callable[[str], Awaitable[int]]


class SeqAllocator(ABC):
    @abstractmethod
    async def next(self, conversation_id: str) -> int: ...

    @abstractmethod
    async def current(self, conversation_id: str) -> int:
        """The highest seq allocated so far (0 when none)."""

    async def close(self) -> None:
        pass


class InProcessSeqAllocator(SeqAllocator):
    """Counters of the ``max_conversations`` most recently used conversations.

    A counter held for every conversation ever seen grew with each new one (a leak over a
    process's life). Dropping the least recently used is safe: every seq handed out is either
    committed or still pending in the writer, both of which the floor reads, so a dropped counter
    comes back at exactly the value it had.
    """

    def __init__(self, floor: FloorLoader, max_conversations: int = 10_000) -> None:
        if max_conversations < 1:
            raise ValueError("max_conversations must be at least 1")
        self._floor = floor
        self._max = max_conversations
        self._counters: OrderedDict[str, int] = OrderedDict()
        self._init_lock = asyncio.Lock()

    async def _ensure(self, conversation_id: str) -> None:
        if conversation_id in self._counters:
            self._counters.move_to_end(conversation_id)
            return
        async with self._init_lock:
            if conversation_id not in self._counters:
                self._counters[conversation_id] = await self._floor(conversation_id)
                while len(self._counters) > self._max:
                    self._counters.popitem(last=False)

    def __len__(self) -> int:
        return len(self._counters)

    async def next(self, conversation_id: str) -> int:
        # No await between _ensure and the increment: the counter cannot be dropped in between.
        await self._ensure(conversation_id)
        self._counters[conversation_id] += 1
        return self._counters[conversation_id]

    async def current(self, conversation_id: str) -> int:
        await self._ensure(conversation_id)
        return self._counters[conversation_id]


# INCR only an existing key: a missing key must be initialised from the database first, or a
# fresh counter would hand out seqs that already exist.
_INCR_EXISTING = """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
return redis.call('INCR', KEYS[1])
"""


class RedisSeqAllocator(SeqAllocator):
    def __init__(self, redis_url: str, key_prefix: str, floor: FloorLoader) -> None:
        import redis.asyncio as aioredis

        self._redis = aioredis.from_url(redis_url)
        self._prefix = key_prefix
        self._floor = floor
        self._incr = self._redis.register_script(_INCR_EXISTING)

    def _key(self, conversation_id: str) -> str:
        return f"{self._prefix}:seq:{conversation_id}"

    async def next(self, conversation_id: str) -> int:
        key = self._key(conversation_id)
        value = await self._incr(keys=[key])
        if value is None:
            await self._redis.set(key, await self._floor(conversation_id), nx=True)
            value = await self._redis.incr(key)
        return int(value)

    async def current(self, conversation_id: str) -> int:
        value = await self._redis.get(self._key(conversation_id))
        if value is None:
            return await self._floor(conversation_id)
        return int(value)

    async def close(self) -> None:
        await self._redis.aclose()
