"""``ConnectionSlots``: at most ``limit`` model calls of a process hold a connection at once.

At the limit a call waits its turn (first come, first served) for as long as the request timeout
allows, instead of failing after the HTTP pool's own short timeout: a burst of runs is served late
rather than failed. The slot is given back however the call ends (answer, error, timeout, cancel),
so a phase of timed-out or cancelled streams leaves every connection usable. The wait is reported
through ``on_wait`` (seconds) and ``on_waiters`` (calls waiting now), for the service's metrics.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from shared.llm.base import LLMTimeoutError


class ConnectionSlots:
    def __init__(
        self, limit: int, *, on_wait: Callable[[float], None] | None = None,
        on_waiters: Callable[[int], None] | None = None,
    ) -> None:
        if limit < 1:
            raise ValueError("the LLM connection limit must be at least 1")
        self.limit = limit
        self._free = asyncio.Semaphore(limit)
        self._on_wait = on_wait
        self._on_waiters = on_waiters
        self.waiting = 0
        self.in_use = 0

    @asynccontextmanager
    async def slot(self, timeout: float) -> AsyncIterator[None]:
        """Hold one connection slot for the body; raises ``LLMTimeoutError`` when none was free
        within ``timeout`` seconds."""
        started = time.monotonic()
        self._count_waiter(+1)
        try:
            async with asyncio.timeout(timeout):
                await self._free.acquire()
        except TimeoutError:
            raise LLMTimeoutError(
                f"timed out waiting {timeout:g} s for a free connection to the LLM endpoint "
                f"(all {self.limit} in use)"
            ) from None
        finally:
            self._count_waiter(-1)
            if self._on_wait is not None:
                self._on_wait(time.monotonic() - started)
        self.in_use += 1
        try:
            yield
        finally:
            self.in_use -= 1
            self._free.release()

    def _count_waiter(self, delta: int) -> None:
        self.waiting += delta
        if self._on_waiters is not None:
            self._on_waiters(self.waiting)
