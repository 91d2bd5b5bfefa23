"""``fair_share``: a stream worked through in bursts lets the event loop go round every millisecond.

With its hand-offs running inline, a producer working through a burst (many deltas from one network
read) never waits and would hold the loop while other streams' first events queue behind it. The
pause comes when the next item is asked for, so the item in hand has been handed over by then.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, AsyncIterator
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["FairShare", "fair_share"]

BUDGET_S = 0.001


class FairShare:
    """Lets the loop go round once the caller has kept it for ``budget_s`` without a wait."""

    def __init__(self, budget_s: float = BUDGET_S) -> None:
        self._budget = budget_s
        self._since = time.perf_counter()

    async def checkpoint(self) -> None:
        now = time.perf_counter()
        if now - self._since >= self._budget:
            await asyncio.sleep(0)
            self._since = time.perf_counter()


class _FairStream(Generic[T]):
    __slots__ = ("_items", "_share")

    def __init__(self, items: AsyncIterator[T], share: FairShare) -> None:
        self._items = items
        self._share = share

    def __aiter__(self) -> _FairStream[T]:
        return self

    async def __anext__(self) -> T:
        await self._share.checkpoint()
        return await self._items.__anext__()


def fair_share(items: AsyncIterable[T], budget_s: float = BUDGET_S) -> AsyncIterator[T]:
    """``items``, pausing for one pass of the loop before the next item once ``budget_s`` of work
    went by without a wait. Closing the stream stays the caller's job (it holds ``items``)."""
    return _FairStream(items.__aiter__(), FairShare(budget_s))
