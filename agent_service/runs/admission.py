"""Admission of runs: at most ``AGENT_SERVICE_MAX_RUNS_IN_FLIGHT`` runs of this process execute at once,
up to ``AGENT_SERVICE_MAX_QUEUED_RUNS`` more wait for a place, the rest are refused (``shared.admission``).

An execute takes its ``RunPlace`` before anything is written: refused, it answers 503 with Retry-After
(``Overloaded``). Granted, the run goes as always. Queued, the run is claimed and its stream opened
like any other, then waits for its place before its first model call, saying so with a ``WAITING``
event (``limit: "capacity"``: the chat shows it as ``agent.waiting``) and again whenever the wait
outlasts its estimate. The place is given back when the run's task ends, however it ends.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel

from agent_service.errors import Overloaded
from agent_service.metrics import AgentMetrics
from shared.admission import Admission, QueuedWait, Refused, Slot
from shared.protocol import EventType, WaitingData

CAPACITY = "capacity"


class RunPlace:
    """A run's place: granted, or queued until ``wait`` returns; ``release`` when the run ends."""

    def __init__(self, slot: Slot, metrics: AgentMetrics) -> None:
        self._slot = slot
        self._metrics = metrics

    @property
    def granted(self) -> bool:
        return self._slot.granted

    async def wait(self, emit: Callable[[EventType, BaseModel], object]) -> None:
        """Wait for the place, emitting WAITING (``emit(type, data)``, the run's) while queued."""
        if self._slot.granted:
            return

        def report(where: QueuedWait) -> None:
            emit(EventType.WAITING, WaitingData(reason=_reason(where), wait_s=round(where.wait_s, 1), limit=CAPACITY))

        self._metrics.run_queue_wait.observe(await self._slot.wait(report))

    def release(self) -> None:
        self._slot.release()


class RunAdmission:
    def __init__(self, *, max_in_flight: int, max_queued: int, metrics: AgentMetrics) -> None:
        self._metrics = metrics
        self._admission = Admission(max_in_flight=max_in_flight, max_queued=max_queued, on_change=self._gauges)

    def admit(self) -> RunPlace:
        """A place for a new run, granted or queued; ``Overloaded`` (503) when the queue is full too."""
        try:
            return RunPlace(self._admission.admit(), self._metrics)
        except Refused as refused:
            self._metrics.runs_refused.inc()
            raise Overloaded(
                {"message": "the agent is at capacity: every place for a run is taken and the queue is full",
                 "in_flight": refused.in_flight, "queued": refused.queued, "retry_after_s": refused.retry_after_s},
                refused.retry_after_s,
            ) from None

    def _gauges(self, in_flight: int, queued: int) -> None:
        self._metrics.runs_in_flight.set(in_flight)
        self._metrics.runs_queued.set(queued)


def _reason(where: QueuedWait) -> str:
    ahead = "next in line" if where.position == 1 else f"number {where.position} in line"
    return (f"the agent is at capacity ({where.max_in_flight} runs at once); this run is {ahead} and starts "
            f"as soon as one ends")

