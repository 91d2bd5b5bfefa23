"""Session correlation rules on top of the repository: get-or-create of a conversation's open
session. Status changes are the repository's conditional updates (``update_status``)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from conversation_service.agent_sessions.errors import AgentSessionConflict
from conversation_service.agent_sessions.repository import AgentSessionRepository
from conversation_service.db.models import ConversationAgentSession


class AgentSessionService:
    def __init__(self, session: AsyncSession) -> None:
        self.repository = AgentSessionRepository(session)

    async def get_or_create_open(
        self, conversation_id: str, *, profile_name: str = "default"
    ) -> tuple[ConversationAgentSession, bool]:
        """The conversation's open session, created when there is none; ``(row, created)``.

        When a concurrent request creates it first, the winner's row is returned; only when it
        cannot be seen yet (its transaction has not committed) does this raise
        ``AgentSessionConflict`` (409), and the caller may retry.
        """
        existing = await self.repository.get_open_for_conversation(conversation_id)
        if existing is not None:
            return existing, False
        try:
            return await self.repository.create(conversation_id, profile_name=profile_name), True
        except AgentSessionConflict:
            winner = await self.repository.get_open_for_conversation(conversation_id)
            if winner is not None:
                return winner, False
            raise
