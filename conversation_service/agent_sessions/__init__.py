"""Session correlation: which Agent Service session a conversation is talking to (Story 2)."""

from conversation_service.agent_sessions.errors import AgentSessionConflict, UnknownConversation
from conversation_service.agent_sessions.repository import AgentSessionRepository
from conversation_service.agent_sessions.service import AgentSessionService

__all__ = [
    "AgentSessionConflict",
    "AgentSessionRepository",
    "AgentSessionService",
    "UnknownConversation",
]
