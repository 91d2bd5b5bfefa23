"""Per-conversation frame sequence numbers: a seq is forever.

Once a client may have seen seq N of a conversation, N names that frame for good, also after a
SIGKILL, a restart or a takeover by another replica. Frames are published before their group
commit, so the highest *persisted* seq is no safe place to restart counting from: the frames of
the last commit window were shown live and died with the process. Counting therefore restarts
from a durable reservation (``conversations.seq_reserved``, see ``reservations``) that is raised
before any seq beyond it is handed out:

- ``InProcessSeqAllocator`` (one replica) takes blocks of ``block`` seqs from the reservation and
  counts through them in memory: one small write per block, none per frame. After a crash, new
  frames start above the block the dead process held: a hole, never a reuse. A graceful close
  hands the unused part of its blocks back, so a clean restart leaves no hole.
- ``RedisSeqAllocator`` (several replicas) shares one counter with ``INCR``; a replica raises the
  reservation before it hands out a seq beyond what it knows is reserved, and a missing key (first
  use, or Redis lost it) starts from the reservation, not from the last persisted frame. Redis
  only accelerates: while it is away each seq is taken from the reservation itself (one UPDATE per
  frame, recorded as ``seq_without_redis``), and a counter that lags those (Redis restarted, or a
  replica that could still reach it) is raised above them before it hands out another seq.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Protocol

from shared.keyed_lock import KeyedLock
from shared.redis_client import REDIS_UNAVAILABLE, Absence, connect

log = logging.getLogger(__name__)

# Reads the highest seq that exists for a conversation (persisted frames and frames waiting in this
# process's writer): where a replay stops when this process has handed out none.
FloorLoader = Callable[[str], Awaitable[int]]


class Reservations(Protocol):
    """The durable reservation of each conversation (``reservations.SeqReservations``)."""

    async def take_block(self, conversation_id: str, *, above: int, block: int) -> int:
        """Raise the reservation to ``max(reserved, above) + block``; return it."""

    async def cover(self, conversation_id: str, seq: int, *, block: int) -> tuple[int, int]:
        """Make the reservation at least ``seq`` (raised to ``seq + block`` when below); return it and
        the highest seq handed out without Redis."""

    async def take_without_redis(self, conversation_id: str) -> int:
        """The next seq straight from the reservation (Redis is away)."""

    async def reserved(self, conversation_id: str) -> int: ...

    async def release(self, unused: dict[str, tuple[int, int]]) -> None:
        """Lower each reservation from ``limit`` back to ``last`` where nobody raised it since."""


class SeqAllocator(ABC):
    @abstractmethod
    async def next(self, conversation_id: str) -> int: ...

    @abstractmethod
    async def current(self, conversation_id: str) -> int:
        """The highest seq allocated so far (0 when none)."""

    async def close(self) -> None:
        pass


class _Block:
    __slots__ = ("last", "limit")

    def __init__(self, last: int, limit: int) -> None:
        self.last = last  # the last seq handed out from the reservation (or below its start)
        self.limit = limit  # the reservation this process holds: seqs up to it are its own


class InProcessSeqAllocator(SeqAllocator):
    """Blocks of the ``max_conversations`` most recently used conversations.

    The next block is reserved in the background once half of the current one is used, so a
    streaming conversation's frames wait for no database write; only its first frame in this
    process does. Dropping the least recently used block keeps memory bounded; its unused seqs
    become a hole (the next frame of that conversation takes a new block above it).
    """

    def __init__(
        self, floor: FloorLoader, reservations: Reservations, *, block: int = 100, max_conversations: int = 10_000,
    ) -> None:
        if max_conversations < 1:
            raise ValueError("max_conversations must be at least 1")
        if block < 1:
            raise ValueError("block must be at least 1")
        self._floor = floor
        self._reservations = reservations
        self._block_size = block
        self._max = max_conversations
        self._blocks: OrderedDict[str, _Block] = OrderedDict()
        self._locks = KeyedLock()
        self._ahead: dict[str, asyncio.Task[None]] = {}

    def __len__(self) -> int:
        return len(self._blocks)

    async def next(self, conversation_id: str) -> int:
        block = self._blocks.get(conversation_id)
        if block is None or block.last >= block.limit:
            async with self._locks(conversation_id):
                ahead = self._ahead.get(conversation_id)
                if ahead is not None:
                    await asyncio.shield(ahead)
                block = self._blocks.get(conversation_id)
                if block is None or block.last >= block.limit:
                    block = await self._take_block(conversation_id, block)
        # No await from here on: the block cannot be dropped between the check and the increment.
        self._blocks[conversation_id] = block
        self._blocks.move_to_end(conversation_id)
        while len(self._blocks) > self._max:
            self._blocks.popitem(last=False)
        block.last += 1
        if block.limit - block.last == self._block_size // 2 and conversation_id not in self._ahead:
            task = asyncio.create_task(self._reserve_ahead(conversation_id, block), name="seq-reserve-ahead")
            self._ahead[conversation_id] = task
        return block.last

    async def _take_block(self, conversation_id: str, block: _Block | None) -> _Block:
        above = block.limit if block is not None else 0
        limit = await self._reservations.take_block(conversation_id, above=above, block=self._block_size)
        start = limit - self._block_size  # ours: (start, limit]
        if block is None:
            return _Block(start, limit)
        block.last, block.limit = max(block.last, start), limit
        return block

    async def _reserve_ahead(self, conversation_id: str, block: _Block) -> None:
        try:
            limit = await self._reservations.take_block(conversation_id, above=block.limit, block=self._block_size)
            if limit - self._block_size == block.limit:
                block.limit = limit  # contiguous: the block simply grows
            # Otherwise someone else reserved in between: the reservation still covers all we
            # hand out, and the next block is taken above it when this one runs out (a hole).
        except Exception:
            log.exception("could not reserve frame seqs ahead; the next block is reserved when needed")
        finally:
            self._ahead.pop(conversation_id, None)

    async def current(self, conversation_id: str) -> int:
        block = self._blocks.get(conversation_id)
        if block is not None:
            return block.last
        return await self._floor(conversation_id)

    async def close(self) -> None:
        """Hand back the seqs reserved and not used, so a clean restart continues without a hole."""
        await asyncio.gather(*self._ahead.values(), return_exceptions=True)
        unused = {cid: (b.last, b.limit) for cid, b in self._blocks.items() if b.last < b.limit}
        self._blocks.clear()
        if unused:
            await self._reservations.release(unused)


# INCR only an existing key, raised first to ARGV[1] (the highest seq known to be handed out without
# Redis) when it lags it: a missing key must be initialised from the reservation first, or a fresh
# counter would hand out seqs that clients have seen already.
_NEXT = """
local current = redis.call('GET', KEYS[1])
if not current then return false end
if tonumber(current) < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
return redis.call('INCR', KEYS[1])
"""


class RedisSeqAllocator(SeqAllocator):
    def __init__(
        self, redis_url: str, key_prefix: str, floor: FloorLoader, reservations: Reservations, *,
        block: int = 100, max_conversations: int = 10_000,
    ) -> None:
        self._redis = connect(redis_url)
        self._prefix = key_prefix
        self._floor = floor
        self._reservations = reservations
        self._block_size = block
        self._max = max_conversations
        # What this replica last saw reserved, per conversation (a lower bound of the truth), and the
        # highest seq it knows was handed out without Redis.
        self._known: OrderedDict[str, int] = OrderedDict()
        self._without_redis: OrderedDict[str, int] = OrderedDict()
        self._next = self._redis.register_script(_NEXT)
        self.absence = Absence("frame seqs")

    def _key(self, conversation_id: str) -> str:
        return f"{self._prefix}:seq:{conversation_id}"

    async def next(self, conversation_id: str) -> int:
        if not self.absence.skip():
            try:
                value = await self._next_shared(conversation_id)
                self.absence.succeeded()
                return value
            except REDIS_UNAVAILABLE as exc:
                self.absence.failed(exc)
        # Redis is away: straight from the durable reservation.
        value = await self._reservations.take_without_redis(conversation_id)
        _remember(self._without_redis, conversation_id, value, self._max)
        return value

    async def _next_shared(self, conversation_id: str) -> int:
        key = self._key(conversation_id)
        while True:
            value = await self._next(keys=[key], args=[self._without_redis.get(conversation_id, 0)])
            if value is None:
                await self._redis.set(key, await self._reservations.reserved(conversation_id), nx=True)
                continue
            value = int(value)
            if value <= self._known.get(conversation_id, 0):
                _remember(self._known, conversation_id, self._known[conversation_id], self._max)
                return value
            # Durable before anyone can see it: a Redis that loses the key restarts above it.
            reserved, without_redis = await self._reservations.cover(conversation_id, value, block=self._block_size)
            if value <= without_redis:
                # The counter lags seqs a replica handed out while Redis was away: raised, and again.
                _remember(self._without_redis, conversation_id, without_redis, self._max)
                continue
            _remember(self._known, conversation_id, reserved, self._max)
            return value

    async def current(self, conversation_id: str) -> int:
        if not self.absence.skip():
            try:
                value = await self._redis.get(self._key(conversation_id))
                self.absence.succeeded()
                if value is not None:
                    return int(value)
            except REDIS_UNAVAILABLE as exc:
                self.absence.failed(exc)
        return await self._floor(conversation_id)

    async def close(self) -> None:
        await self._redis.aclose()


def _remember(known: OrderedDict[str, int], conversation_id: str, value: int, limit: int) -> None:
    """Keep the highest ``value`` per conversation, the most recently used ``limit`` of them."""
    known[conversation_id] = max(value, known.get(conversation_id, 0))
    known.move_to_end(conversation_id)
    while len(known) > limit:
        known.popitem(last=False)
