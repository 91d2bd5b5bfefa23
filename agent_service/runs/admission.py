"""Admission of runs: at most ``AGENT_SERVICE_MAX_RUNS_IN_FLIGHT`` runs of this process execute at once,
up to ``AGENT_SERVICE_MAX_QUEUED_RUNS`` more wait for a place, the rest are refused (``shared.admission``).

An execute takes its place before anything is written: refused, it answers 503 with Retry-After
(``Overloaded``). Granted, the run goes as always. Queued, the run is claimed and its stream opened
like any other, then waits for its place before its first model call, saying so with a ``WAITING``
event (``limit: "capacity"``: the chat shows it as ``agent.waiting``) and again whenever the wait
outlasts its estimate (``capacity_wait``). The place is given back when the run's task ends, however
it ends (``RunManager``).
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel

from agent_service.errors import Overloaded
from agent_service.metrics import AgentMetrics
from agent_service.settings import AgentServiceSettings
from shared.admission import Admission, AdmissionMetrics, QueuedWait, Refused
from shared.protocol import EventType, WaitingData

CAPACITY = "capacity"


def run_admission(settings: AgentServiceSettings, metrics: AgentMetrics) -> Admission:
    return Admission(
        max_in_flight=settings.max_runs_in_flight, max_queued=settings.max_queued_runs, refusal=_overloaded,
        metrics=AdmissionMetrics(metrics.runs_in_flight, metrics.runs_queued, metrics.runs_refused,
                                 metrics.run_queue_wait),
    )


def capacity_wait(emit: Callable[[EventType, BaseModel], object]) -> Callable[[QueuedWait], None]:
    """How a queued run says where it stands: a WAITING event through its ``emit``."""

    def report(where: QueuedWait) -> None:
        ahead = "next in line" if where.position == 1 else f"number {where.position} in line"
        reason = (f"the agent is at capacity ({where.max_in_flight} runs at once); this run is {ahead} and "
                  f"starts as soon as one ends")
        emit(EventType.WAITING, WaitingData(reason=reason, wait_s=round(where.wait_s, 1), limit=CAPACITY))

    return report


def _overloaded(refused: Refused) -> Overloaded:
    return Overloaded(
        {"message": "the agent is at capacity: every place for a run is taken and the queue is full",
         "in_flight": refused.in_flight, "queued": refused.queued, "retry_after_s": refused.retry_after_s},
        refused.retry_after_s,
    )
