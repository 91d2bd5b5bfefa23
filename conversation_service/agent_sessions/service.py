"""Session correlation rules on top of the repository: get-or-create of a conversation's open
session. Status changes are the repository's conditional updates (``update_status``)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from conversation_service.agent_sessions.errors import AgentSessionConflict
from conversation_service.agent_sessions.repository import AgentSessionRepository
from conversation_service.db.models import AgentSessionStatus, ConversationAgentSession


class AgentSessionService:
    def __init__(self, session: AsyncSession) -> None:
        self.repository = AgentSessionRepository(session)

    async def get_or_create_open(
        self, conversation_id: str, *, profile_name: str = "default", agent_name: str | None = None,
        switch_to: str | None = None,
    ) -> tuple[ConversationAgentSession, bool]:
        """The conversation's open session, created when there is none; ``(row, created)``.

        A new session is with ``agent_name`` (an A2A agent's name; None: the Agent Service).
        ``switch_to``: the user named this A2A agent, so an open session with another agent is
        completed first and a new one started with it.

        When a concurrent request creates it first, the winner's row is returned; only when it
        cannot be seen yet (its transaction has not committed) does this raise
        ``AgentSessionConflict`` (409), and the caller may retry.
        """
        existing = await self.repository.get_open_for_conversation(conversation_id)
        if existing is not None and switch_to is not None and existing.agent_name != switch_to:
            await self.repository.update_status(existing.id, AgentSessionStatus.COMPLETED,
                                                expected=[AgentSessionStatus.ACTIVE])
            existing = await self.repository.get_open_for_conversation(conversation_id)
        if existing is not None:
            return existing, False
        name = switch_to if switch_to is not None else agent_name
        try:
            return await self.repository.create(conversation_id, profile_name=profile_name, agent_name=name), True
        except AgentSessionConflict:
            winner = await self.repository.get_open_for_conversation(conversation_id)
            if winner is not None:
                return winner, False
            raise
