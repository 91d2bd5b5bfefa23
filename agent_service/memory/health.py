"""How well the memory store is doing, and so how much a run asks of it.

NORMAL: recall the top ``normal_k`` (8) memories. A failure makes it DEGRADED for ``degraded_window_s``
(top ``degraded_k``, 3: a struggling store is asked for less). ``fail_max`` failures in a row open the
breaker: DOWN for ``reset_timeout_s``, when runs use their history only and nothing is stored; then
DEGRADED again for a window, and a success brings it back to NORMAL.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import IntEnum


class MemoryHealthState(IntEnum):
    # The values are the metric's (agent_memory_health).
    NORMAL = 0
    DEGRADED = 1
    DOWN = 2


class MemoryHealth:
    def __init__(
        self, *, normal_k: int = 8, degraded_k: int = 3, degraded_window_s: float = 15.0, fail_max: int = 5,
        reset_timeout_s: float = 60.0, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.normal_k = normal_k
        self.degraded_k = degraded_k
        self.degraded_window_s = degraded_window_s
        self.fail_max = fail_max
        self.reset_timeout_s = reset_timeout_s
        self._clock = clock
        self._failures = 0
        self._degraded_until = float("-inf")
        self._open_until = float("-inf")

    def state(self) -> MemoryHealthState:
        now = self._clock()
        if now < self._open_until:
            return MemoryHealthState.DOWN
        if now < self._degraded_until:
            return MemoryHealthState.DEGRADED
        return MemoryHealthState.NORMAL

    def top_k(self) -> int:
        """How many memories to recall now; 0 when the store is not to be asked."""
        return {MemoryHealthState.NORMAL: self.normal_k, MemoryHealthState.DEGRADED: self.degraded_k}.get(
            self.state(), 0
        )

    def succeeded(self) -> None:
        self._failures = 0
        self._degraded_until = float("-inf")

    def failed(self) -> None:
        now = self._clock()
        self._failures += 1
        self._degraded_until = now + self.degraded_window_s
        if self._failures >= self.fail_max:
            self._failures = 0
            self._open_until = now + self.reset_timeout_s
            self._degraded_until = self._open_until + self.degraded_window_s
