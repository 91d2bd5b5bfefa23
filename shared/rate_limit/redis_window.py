"""Sliding-window counts in Redis, shared by every replica of both services: one script per
reservation so that replicas checking at the same moment cannot both take the last unit, timed by the
Redis server's clock so that replicas' clocks need not agree."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from shared.rate_limit.config import Dimension
from shared.rate_limit.window import Charge, MemoryWindow, Shortfall
from shared.redis_client import REDIS_UNAVAILABLE, Absence, connect

_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
local worst, worst_key = 0, 0
for i, key in ipairs(KEYS) do
  local limit = tonumber(ARGV[3 * i])
  local need = math.min(tonumber(ARGV[3 * i + 1]), limit)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  local entries = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  local used = 0
  for j = 1, #entries, 2 do used = used + tonumber(string.match(entries[j], ':(%d+)$')) end
  if used + need > limit then
    local excess, wait = used + need - limit, window
    for j = 1, #entries, 2 do
      excess = excess - tonumber(string.match(entries[j], ':(%d+)$'))
      if excess <= 0 then wait = math.max(tonumber(entries[j + 1]) + window - now, 1) break end
    end
    if wait > worst then worst, worst_key = wait, i end
  end
end
if worst > 0 then return {worst, worst_key} end
for i, key in ipairs(KEYS) do
  local add = tonumber(ARGV[3 * i + 2])
  if add > 0 then
    redis.call('ZADD', key, now, ARGV[2] .. ':' .. add)
    redis.call('PEXPIRE', key, window)
  end
end
return {0}
"""

_RECORD = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[2] .. ':' .. ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 0
"""


class RedisWindow:
    """The counts in Redis, shared by every replica of both services. While Redis is away (a restart)
    this process counts alone in memory (``MemoryWindow``): the limits hold per process for that
    while, and model calls go on rather than fail."""

    def __init__(self, redis_url: str, prefix: str) -> None:
        self._redis = connect(redis_url)
        self._prefix = prefix
        self._reserve = self._redis.register_script(_RESERVE)
        self._record = self._redis.register_script(_RECORD)
        self._alone = MemoryWindow()
        self.absence = Absence("rate limits")

    def _key(self, key: str, dimension: Dimension) -> str:
        return f"{self._prefix}:{key}:{dimension.value}"

    async def reserve(self, key: str, charges: Sequence[Charge], window_s: float) -> Shortfall | None:
        if not self.absence.skip():
            try:
                shortfall = await self._reserve_shared(key, charges, window_s)
                self.absence.succeeded()
                return shortfall
            except REDIS_UNAVAILABLE as exc:
                self.absence.failed(exc)
        return await self._alone.reserve(key, charges, window_s)

    async def _reserve_shared(self, key: str, charges: Sequence[Charge], window_s: float) -> Shortfall | None:
        args: list[int | str] = [int(window_s * 1000), uuid.uuid4().hex]
        for charge in charges:
            args += [charge.limit, charge.need, charge.add]
        result = await self._reserve(keys=[self._key(key, c.dimension) for c in charges], args=args)
        if int(result[0]) == 0:
            return None
        return Shortfall(charges[int(result[1]) - 1].dimension, int(result[0]) / 1000)

    async def record(self, key: str, dimension: Dimension, amount: int, window_s: float) -> None:
        if amount <= 0:
            return
        if not self.absence.skip():
            try:
                await self._record(keys=[self._key(key, dimension)],
                                   args=[int(window_s * 1000), uuid.uuid4().hex, amount])
                self.absence.succeeded()
                return
            except REDIS_UNAVAILABLE as exc:
                self.absence.failed(exc)
        await self._alone.record(key, dimension, amount, window_s)

    async def aclose(self) -> None:
        await self._redis.aclose()
