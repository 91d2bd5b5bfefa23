"""``TurnObserver``: what is seen of a turn from outside: its span and its duration.

A turn (the reply to one accepted message, agent or direct, by whichever replica) is one span,
``chat turn``, under the message's span; a turn taken over after its replica died, or answered
again, also links to the trace of its message (``turns.traceparent``). Its duration is observed
in ``conversation_turn_duration_seconds`` with the turn's trace as the exemplar.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from shared.tracing import NO_TRACING, Tracing, TracingOff
from shared.tracing.core import links_to


class TurnObserver:
    def __init__(self, tracing: Tracing | TracingOff = NO_TRACING, duration: Any = None) -> None:
        self.tracing = tracing
        self._duration = duration  # a Histogram labelled by outcome, or None (tests without metrics)

    def traceparent(self) -> str | None:
        """The message's trace context, stored with its turn."""
        return self.tracing.traceparent()

    def takeover(self, turn_id: str, traceparent: str | None, takeovers: int) -> Any:
        """A turn's takeover by this replica's sweep: a trace of its own, linked to the message's."""
        return self.tracing.span("chat turn takeover", links=links_to(traceparent), attributes={
            "taskforce.turn.id": turn_id, "taskforce.turn.takeovers": takeovers})

    @contextmanager
    def turn(self, turn_id: str, *, linked: str | None = None, takeover: bool = False) -> Iterator[_Outcome]:
        started = time.perf_counter()
        outcome = _Outcome()
        with self.tracing.turn(turn_id, linked=linked, takeover=takeover) as span:
            try:
                yield outcome
            finally:
                span.set_attribute("taskforce.turn.outcome", outcome.value)
                if self._duration is not None:
                    self._duration[outcome.value].observe(time.perf_counter() - started, self.tracing.exemplar())


class _Outcome:
    """How the turn left this replica: done (its reply ended), left (to a takeover), cancelled."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = "left"
