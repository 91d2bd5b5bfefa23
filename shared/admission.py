"""Admission control: at most ``max_in_flight`` pieces of work of a process at once (runs of the Agent
Service, turns of the ConversationService), up to ``max_queued`` more waiting their turn, the rest
refused at once.

A burst past what a process can serve is answered, never left to stall: work admitted at once runs;
work queued says so (``Slot.wait`` reports its place and an estimate, which each service shows as its
visible wait) and starts first come, first served as slots free; work beyond the queue is refused with
``Refused`` and a ``retry_after_s`` (the service's 503 with ``Retry-After``), before it wrote anything.

The estimates come from how long slots have been held lately (a moving average): with ``N`` in
flight each held ``H`` seconds on average, a slot frees every ``H / N`` seconds, so the ``p``-th in
the queue waits about ``p × H / N``.

Each service gives its metrics (``AdmissionMetrics``) and its error (``refusal``: what a refusal is
raised as, its 503), and says how a queued slot is shown (the ``report`` of ``Slot.wait``).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from prometheus_client import Counter, Gauge, Histogram

__all__ = ["Admission", "AdmissionMetrics", "QueuedWait", "Refused", "Slot"]

# Until slots have been held and released: a guess of a run's or a turn's length.
_FIRST_HOLD_S = 5.0
# Weight of the newest hold time in the moving average.
_HOLD_WEIGHT = 0.2
# Bounds of a Retry-After: at once is no answer, past five minutes a client should look elsewhere.
_RETRY_AFTER_S = (1, 300)
# A queued slot says again where it is once its estimate has passed, at most this often.
_MIN_REPORT_S = 1.0


class Refused(Exception):
    """The queue is full too: retry after ``retry_after_s`` seconds."""

    def __init__(self, retry_after_s: int, in_flight: int, queued: int) -> None:
        super().__init__(f"at capacity: {in_flight} in flight and {queued} waiting; retry in {retry_after_s} s")
        self.retry_after_s = retry_after_s
        self.in_flight = in_flight
        self.queued = queued


@dataclass(frozen=True, slots=True)
class AdmissionMetrics:
    in_flight: Gauge  # slots granted now
    queued: Gauge  # slots waiting now
    refused: Counter  # admissions refused
    waited: Histogram  # seconds a queued slot waited for its grant


@dataclass(frozen=True, slots=True)
class QueuedWait:
    """Where a queued slot stands: its place (1 = next), the expected wait, the bound it waits for."""

    position: int
    wait_s: float
    max_in_flight: int


class Slot:
    """One admitted piece of work: granted at once, or queued until ``wait`` returns. ``release``
    (idempotent) gives it back when the work ends, however it ends, or takes it out of the queue."""

    def __init__(self, admission: Admission, granted: bool) -> None:
        self._admission = admission
        self._turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._granted_at: float | None = None
        self.queued_at = time.monotonic()
        self.released = False
        # Set by whoever takes over giving it back (a task that holds it while it runs).
        self.carried = False
        if granted:
            self._grant()

    @property
    def granted(self) -> bool:
        return self._granted_at is not None

    def _grant(self) -> None:
        self._granted_at = time.monotonic()
        if not self._turn.done():
            self._turn.set_result(None)

    async def wait(self, report: Callable[[QueuedWait], Awaitable[None] | None]) -> None:
        """Return once granted (at once when it was), after ``report`` said where it stands: when it
        starts waiting and again each time its estimate has passed."""
        if self.granted:
            return
        while not self.granted:
            where = self._admission.where(self)
            shown = report(where)
            if shown is not None:
                await shown
            try:
                await asyncio.wait_for(asyncio.shield(self._turn), max(where.wait_s, _MIN_REPORT_S))
            except TimeoutError:
                continue
        assert self._granted_at is not None
        self._admission.waited(self._granted_at - self.queued_at)

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        self._admission._release(self)

    def held_s(self) -> float:
        return 0.0 if self._granted_at is None else time.monotonic() - self._granted_at


class Admission:
    def __init__(
        self, *, max_in_flight: int, max_queued: int, metrics: AdmissionMetrics | None = None,
        refusal: Callable[[Refused], Exception] | None = None,
    ) -> None:
        if max_in_flight < 1 or max_queued < 0:
            raise ValueError("max_in_flight must be at least 1 and max_queued not negative")
        self.max_in_flight = max_in_flight
        self.max_queued = max_queued
        self._metrics = metrics
        self._refusal = refusal
        self._in_flight = 0
        self._queue: deque[Slot] = deque()
        self._hold_s = _FIRST_HOLD_S

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def queued(self) -> int:
        return len(self._queue)

    def admit(self) -> Slot:
        """A slot, granted or queued; when the queue is full too, ``Refused`` (or the service's own
        error for it, ``refusal``)."""
        if self._in_flight < self.max_in_flight and not self._queue:
            self._in_flight += 1
            slot = Slot(self, granted=True)
        elif len(self._queue) < self.max_queued:
            slot = Slot(self, granted=False)
            self._queue.append(slot)
        else:
            refused = Refused(self.retry_after_s(), self._in_flight, len(self._queue))
            if self._metrics is not None:
                self._metrics.refused.inc()
            raise (self._refusal(refused) if self._refusal is not None else refused) from None
        self._changed()
        return slot

    def where(self, slot: Slot) -> QueuedWait:
        try:
            position = self._queue.index(slot) + 1
        except ValueError:
            position = 1
        return QueuedWait(position, self._expected_wait_s(position), self.max_in_flight)

    def retry_after_s(self) -> int:
        """When a refused client may find room: once the queue ahead of it has drained."""
        low, high = _RETRY_AFTER_S
        return min(high, max(low, math.ceil(self._expected_wait_s(len(self._queue) + 1))))

    def _expected_wait_s(self, position: int) -> float:
        return position * self._hold_s / self.max_in_flight

    def _release(self, slot: Slot) -> None:
        if not slot.granted:
            self._queue.remove(slot)
        else:
            self._hold_s += _HOLD_WEIGHT * (slot.held_s() - self._hold_s)
            if self._queue:
                self._queue.popleft()._grant()  # the freed place goes to the longest waiting
            else:
                self._in_flight -= 1
        self._changed()

    def waited(self, seconds: float) -> None:
        if self._metrics is not None:
            self._metrics.waited.observe(seconds)

    def _changed(self) -> None:
        if self._metrics is not None:
            self._metrics.in_flight.set(self._in_flight)
            self._metrics.queued.set(len(self._queue))
