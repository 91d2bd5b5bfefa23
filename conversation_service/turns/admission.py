"""Admission of turns: at most ``MAX_TURNS_IN_FLIGHT`` replies of this process run at once, up to
``MAX_QUEUED_TURNS`` accepted messages wait for a place, the rest are refused (``shared.admission``).

A message takes its place before it is stored: refused, the POST answers 503 with Retry-After
(``Overloaded``) and nothing is written. Granted, the reply starts as always and the reply's task
holds the place until it ends (``TaskSupervisor.carrying``). Queued, the message is stored and
answered 202, and the page is told with an ``agent.waiting`` frame (``limit: "capacity"``, as for a
rate limit) for the message, again whenever the wait outlasts its estimate (``capacity_wait``); the
reply, agent or direct, starts once a place is free.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

from conversation_service.errors import Overloaded
from conversation_service.metrics import TurnMetrics
from conversation_service.settings import ConversationSettings
from shared.admission import Admission, AdmissionMetrics, QueuedWait, Refused
from shared.protocol import utcnow

CAPACITY = "capacity"


def turn_admission(settings: ConversationSettings, metrics: TurnMetrics) -> Admission:
    return Admission(
        max_in_flight=settings.max_turns_in_flight, max_queued=settings.max_queued_turns, refusal=_overloaded,
        metrics=AdmissionMetrics(metrics.in_flight, metrics.queued, metrics.refused, metrics.queue_wait_seconds),
    )


def capacity_wait(show: Callable[[dict], Awaitable[object]]) -> Callable[[QueuedWait], Awaitable[None]]:
    """How a queued message says where it stands: ``show(data)`` publishes an ``agent.waiting`` frame
    with this data (the caller adds the message's id)."""

    async def report(where: QueuedWait) -> None:
        ahead = "next in line" if where.position == 1 else f"number {where.position} in line"
        reason = (f"the chat is at capacity ({where.max_in_flight} replies at once); your message is {ahead} "
                  f"and is answered as soon as one ends")
        await show({"reason": reason, "wait_s": round(where.wait_s, 1), "limit": CAPACITY,
                    "until": (utcnow() + timedelta(seconds=where.wait_s)).isoformat()})

    return report


def _overloaded(refused: Refused) -> Overloaded:
    return Overloaded(
        {"message": f"the chat is busy: every place for a reply is taken and {refused.queued} messages are "
                    f"waiting; try again in {refused.retry_after_s} s",
         "in_flight": refused.in_flight, "queued": refused.queued, "retry_after_s": refused.retry_after_s},
        refused.retry_after_s,
    )
