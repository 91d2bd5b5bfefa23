"""Admission of turns: at most ``MAX_TURNS_IN_FLIGHT`` replies of this process run at once, up to
``MAX_QUEUED_TURNS`` accepted messages wait for a place, the rest are refused (``shared.admission``).

A message takes its ``TurnPlace`` before it is stored: refused, the POST answers 503 with Retry-After
(``Overloaded``) and nothing is written. Granted, the reply starts as always and the reply's task
holds the place until it ends (``TaskSupervisor.carrying``). Queued, the message is stored and
answered 202, and the page is told with an ``agent.waiting`` frame (``limit: "capacity"``, as for a
rate limit) for the message, again whenever the wait outlasts its estimate; the reply, agent or
direct, starts once a place is free.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

from conversation_service.errors import Overloaded
from conversation_service.metrics import TurnMetrics
from shared.admission import Admission, QueuedWait, Refused, Slot
from shared.protocol import utcnow

CAPACITY = "capacity"


class TurnPlace:
    """A turn's place: granted, or queued until ``wait`` returns. ``release`` (idempotent) when the
    reply ends, or when the message is not answered here after all."""

    def __init__(self, slot: Slot, metrics: TurnMetrics) -> None:
        self._slot = slot
        self._metrics = metrics
        # Set once a reply's task holds the place (``TaskSupervisor.carrying``): it gives it back.
        self.carried = False

    @property
    def granted(self) -> bool:
        return self._slot.granted

    async def wait(self, show: Callable[[dict], Awaitable[object]]) -> None:
        """Wait for the place; ``show(data)`` publishes each ``agent.waiting`` frame's data but the
        message id (why, how long, until when)."""

        async def report(where: QueuedWait) -> None:
            await show({"reason": _reason(where), "wait_s": round(where.wait_s, 1), "limit": CAPACITY,
                        "until": (utcnow() + timedelta(seconds=where.wait_s)).isoformat()})

        self._metrics.queue_wait_seconds.observe(await self._slot.wait(report))

    def release(self) -> None:
        self._slot.release()


class TurnAdmission:
    def __init__(self, *, max_in_flight: int, max_queued: int, metrics: TurnMetrics) -> None:
        self._metrics = metrics
        self._admission = Admission(max_in_flight=max_in_flight, max_queued=max_queued, on_change=self._gauges)

    def admit(self) -> TurnPlace:
        """A place for a new reply, granted or queued; ``Overloaded`` (503) when the queue is full too."""
        try:
            return TurnPlace(self._admission.admit(), self._metrics)
        except Refused as refused:
            self._metrics.refused.inc()
            raise Overloaded(
                {"message": f"the chat is busy: every place for a reply is taken and {refused.queued} messages "
                            f"are waiting; try again in {refused.retry_after_s} s",
                 "in_flight": refused.in_flight, "queued": refused.queued, "retry_after_s": refused.retry_after_s},
                refused.retry_after_s,
            ) from None

    def _gauges(self, in_flight: int, queued: int) -> None:
        self._metrics.in_flight.set(in_flight)
        self._metrics.queued.set(queued)


def _reason(where: QueuedWait) -> str:
    ahead = "next in line" if where.position == 1 else f"number {where.position} in line"
    return (f"the chat is at capacity ({where.max_in_flight} replies at once); your message is {ahead} and is "
            f"answered as soon as one ends")
