"""Bookkeeping of one conversation's agent turns in this process, and the claim read ahead.

Turns of a conversation run one after another (``ConversationTurns.lock``). A turn normally starts
by claiming the conversation's agent session and reading its history in a transaction of its own.
When the dispatcher has just read both in its routing transaction (the session open and ACTIVE,
no turn of the conversation in flight), the turn uses that read instead: one transaction less
between the user's message and the agent call. The read is only as good as nothing having
happened to the conversation since, which ``registered`` (a count of the turns started, kept while
anyone holds the object) tells: exactly one turn, this one, must have started after the read.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass

from conversation_service.db.models import ConversationAgentSession, Message


class ConversationTurns:
    __slots__ = ("__weakref__", "in_flight", "lock", "registered")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.registered = 0  # turns started since this object exists
        self.in_flight = 0  # started and not ended

    @property
    def idle(self) -> bool:
        return self.in_flight == 0

    def begin(self) -> None:
        self.registered += 1
        self.in_flight += 1

    def end(self) -> None:
        self.in_flight -= 1


class TurnRegistry:
    """The ``ConversationTurns`` of the conversations that have a turn (or a read) under way; an
    entry goes away with its last holder, so the map does not grow with every conversation."""

    def __init__(self) -> None:
        self._by_conversation: weakref.WeakValueDictionary[str, ConversationTurns] = weakref.WeakValueDictionary()

    def get(self, conversation_id: str) -> ConversationTurns:
        turns = self._by_conversation.get(conversation_id)
        if turns is None:
            turns = self._by_conversation[conversation_id] = ConversationTurns()
        return turns


@dataclass(slots=True)
class PreparedTurn:
    """A message being routed, as its conversation's turns stood when the routing read began;
    ``claim`` is the open ACTIVE session and the history before the message, when that read took
    them too (only while no turn was in flight)."""

    turns: ConversationTurns
    registered_before: int
    idle: bool
    claim: tuple[ConversationAgentSession, list[Message]] | None = None

    def still_valid(self) -> bool:
        """True when the only turn started since the read is the one about to use it (call right
        after starting that turn)."""
        return self.turns.registered == self.registered_before + 1
