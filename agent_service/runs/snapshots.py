"""What this process remembers of the sessions whose last run it completed.

A new message to such a session can start its model call before the session is read from the
database: the transcript it continues is the one the completed run wrote. The read that follows
confirms it (``matches``): same run, same last event, still COMPLETED, or the early call is dropped
and the run starts from the database's state. Bounded: the least recently completed go first.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from agent_service.models import AgentSession
from shared.protocol import SessionStatus

DEFAULT_CAPACITY = 256


@dataclass(frozen=True, slots=True)
class SessionSnapshot:
    run_id: str
    last_seq: int
    transcript: list[dict[str, Any]]

    def matches(self, session: AgentSession) -> bool:
        """The session is still as this run left it (nothing ran or changed it since)."""
        return (
            session.status == SessionStatus.COMPLETED.value
            and session.current_run_id == self.run_id
            and session.last_seq == self.last_seq
            and (session.seq_reserved or 0) <= self.last_seq
        )


class SessionSnapshots:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._capacity = capacity
        self._by_session: OrderedDict[str, SessionSnapshot] = OrderedDict()

    def remember(self, session_id: str, snapshot: SessionSnapshot) -> None:
        self._by_session[session_id] = snapshot
        self._by_session.move_to_end(session_id)
        while len(self._by_session) > self._capacity:
            self._by_session.popitem(last=False)

    def take(self, session_id: str) -> SessionSnapshot | None:
        """The snapshot, forgotten here: a run is about to change the session."""
        return self._by_session.pop(session_id, None)

    def __len__(self) -> int:
        return len(self._by_session)
