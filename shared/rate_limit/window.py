"""Sliding-window counts: how much of each budget the calls of the last ``window_s`` seconds used.

``reserve`` checks every dimension of one call at once and records it only if all fit (a call that
would fit its requests but not its tokens takes nothing); when one does not fit it says which, and
how long until enough of the window's oldest entries have aged out for it to. ``MemoryWindow``
counts in this process; ``redis_window.RedisWindow`` in Redis (a module of its own, imported only when
a Redis URL is configured: the Redis client costs a process that has none ~6 MiB).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from shared.rate_limit.config import Dimension


@dataclass(frozen=True, slots=True)
class Charge:
    """One dimension of a call: it fits when ``used + need <= limit``; on success ``add`` is recorded.
    (Output tokens are known only after the call: it needs one token of room and records nothing.)"""

    dimension: Dimension
    limit: int
    need: int
    add: int


@dataclass(frozen=True, slots=True)
class Shortfall:
    dimension: Dimension
    wait_s: float


class Window(Protocol):
    async def reserve(self, key: str, charges: Sequence[Charge], window_s: float) -> Shortfall | None: ...

    async def record(self, key: str, dimension: Dimension, amount: int, window_s: float) -> None: ...

    async def aclose(self) -> None: ...


def _wait_until_fits(entries: Sequence[tuple[float, int]], used: int, charge: Charge, window_s: float, now: float) -> float:
    """Seconds until enough of ``entries`` (oldest first, each ``(expires_at, weight)``) age out for
    ``charge`` to fit."""
    excess = used + min(charge.need, charge.limit) - charge.limit
    for expires_at, weight in entries:
        excess -= weight
        if excess <= 0:
            return max(expires_at - now, 0.001)
    return window_s


class MemoryWindow:
    """Each entry keeps when it ages out, so a budget whose entries all have is forgotten (``_sweep``):
    organisations that stop calling leave nothing behind."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, sweep_every_s: float = 60.0) -> None:
        self._clock = clock
        self._entries: dict[tuple[str, Dimension], deque[tuple[float, int]]] = {}
        self._sweep_every_s = sweep_every_s
        self._next_sweep = clock() + sweep_every_s

    def __len__(self) -> int:
        """How many budgets (key and dimension) hold entries or were used since the last sweep."""
        return len(self._entries)

    def _current(self, key: str, dimension: Dimension, now: float) -> deque[tuple[float, int]]:
        entries = self._entries.setdefault((key, dimension), deque())
        while entries and entries[0][0] <= now:
            entries.popleft()
        return entries

    def _sweep(self, now: float) -> None:
        if now < self._next_sweep:
            return
        self._next_sweep = now + self._sweep_every_s
        for budget, entries in list(self._entries.items()):
            if not entries or entries[-1][0] <= now:  # the newest has aged out: so has every other
                del self._entries[budget]

    async def reserve(self, key: str, charges: Sequence[Charge], window_s: float) -> Shortfall | None:
        now = self._clock()
        self._sweep(now)
        worst: Shortfall | None = None
        for charge in charges:
            entries = self._current(key, charge.dimension, now)
            used = sum(weight for _, weight in entries)
            # A call larger than the whole budget goes alone, once the window is empty.
            if used + min(charge.need, charge.limit) > charge.limit:
                wait = _wait_until_fits(entries, used, charge, window_s, now)
                if worst is None or wait > worst.wait_s:
                    worst = Shortfall(charge.dimension, wait)
        if worst is not None:
            return worst
        for charge in charges:
            if charge.add:
                self._entries[(key, charge.dimension)].append((now + window_s, charge.add))
        return None

    async def record(self, key: str, dimension: Dimension, amount: int, window_s: float) -> None:
        if amount > 0:
            now = self._clock()
            self._sweep(now)
            self._current(key, dimension, now).append((now + window_s, amount))

    async def aclose(self) -> None:
        return None


# KEYS: one sorted set per dimension. ARGV: window in ms, a unique id, then limit/need/add per key.
# Members are "<id>:<weight>" scored by the time in ms; the result is {0} or {wait_ms, key index}.
