"""Run-domain types that do not cross the wire (the wire contract is ``shared.protocol``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent_service.events.event_log import LiveSubscription


@dataclass(frozen=True, slots=True)
class RunHandle:
    """The run an execute started or joined: its stream replays from ``first_seq``.

    ``live`` is the execute's own subscription to a run it started, taken before the run's task
    first ran: it holds every event of the run, so the response streams from memory from its
    first byte on, however late it starts. None for a joined run.
    """

    session_id: str
    run_id: str
    first_seq: int
    joined: bool = False
    live: LiveSubscription | None = field(default=None, compare=False, repr=False)
