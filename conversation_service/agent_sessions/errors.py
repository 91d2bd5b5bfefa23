"""Errors of session correlation, in the service's vocabulary (``conversation_service.errors``)."""

from __future__ import annotations

from conversation_service.errors import Conflict, NotFound


class AgentSessionConflict(Conflict):
    """Another agent session is already open for this conversation (or the Agent Service session id
    is already mapped to another row). Concurrent first messages meet this: one wins, the rest get
    409 and retry or join the winner's session."""

    error = "agent_session_conflict"


class UnknownConversation(NotFound):
    """The conversation to correlate with does not exist (anymore)."""

    error = "not_found"
