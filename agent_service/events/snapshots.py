"""What this process remembers of the sessions whose last run it completed.

A new message to such a session can start its model call before the session is read from the
database: the transcript it continues is the one the completed run wrote. The read that follows
confirms it (``matches``): same run, same last event, still COMPLETED, or the early call is dropped
and the run starts from the database's state.

Bounded twice, the least recently completed going first: by sessions (``capacity``) and by the
estimated size of their transcripts (``max_bytes``). A load that starts a new conversation every
few dozen turns leaves a completed session behind each time; without a byte bound long transcripts
would keep the cache growing until it held ``capacity`` of them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from agent_service.access.caller import Owner
from agent_service.models import AgentSession
from shared.protocol import SessionStatus

DEFAULT_CAPACITY = 256
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
# What a transcript message costs in memory besides its text: the dict, its keys and the string
# headers (measured with tracemalloc: ~370 bytes for a short built message, ~500 read from JSON).
MESSAGE_OVERHEAD_BYTES = 300
TOOL_CALL_OVERHEAD_BYTES = 450


def transcript_bytes(transcript: Sequence[dict[str, Any]]) -> int:
    """An estimate of the memory a transcript holds: its text plus a fixed cost per message and
    per tool call. Close enough to bound a cache; exact accounting would cost more than it saves."""
    total = 0
    for message in transcript:
        total += MESSAGE_OVERHEAD_BYTES + len(message.get("content") or "")
        for call in message.get("tool_calls") or ():
            total += TOOL_CALL_OVERHEAD_BYTES + len(orjson.dumps(call.get("arguments")))
    return total


@dataclass(frozen=True, slots=True)
class SessionSnapshot:
    run_id: str
    last_seq: int
    transcript: list[dict[str, Any]]
    # The session's owner: only a caller who may see the session starts from its transcript.
    owner: Owner | None = None
    # Computed once, when the snapshot is made: the cache's byte bound adds these up.
    size: int = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", transcript_bytes(self.transcript))

    def matches(self, session: AgentSession) -> bool:
        """The session is still as this run left it (nothing ran or changed it since)."""
        return (
            session.status == SessionStatus.COMPLETED.value
            and session.current_run_id == self.run_id
            and session.last_seq == self.last_seq
            and (session.seq_reserved or 0) <= self.last_seq
        )


class SessionSnapshots:
    def __init__(self, capacity: int = DEFAULT_CAPACITY, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._by_session: OrderedDict[str, SessionSnapshot] = OrderedDict()
        self._bytes = 0

    def remember(self, session_id: str, snapshot: SessionSnapshot) -> None:
        self.take(session_id)
        if snapshot.size > self._max_bytes:
            return  # it alone would push out every other session; it is read from the database instead
        self._by_session[session_id] = snapshot
        self._bytes += snapshot.size
        while len(self._by_session) > self._capacity or self._bytes > self._max_bytes:
            _, evicted = self._by_session.popitem(last=False)
            self._bytes -= evicted.size

    def take(self, session_id: str) -> SessionSnapshot | None:
        """The snapshot, forgotten here: a run is about to change the session."""
        snapshot = self._by_session.pop(session_id, None)
        if snapshot is not None:
            self._bytes -= snapshot.size
        return snapshot

    @property
    def bytes(self) -> int:
        """The estimated size of the transcripts held."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._by_session)
