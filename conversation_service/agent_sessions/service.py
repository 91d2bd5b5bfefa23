"""Session correlation rules on top of the repository: get-or-create of a conversation's open
session, the allowed status transitions, stale-session cleanup."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from conversation_service.agent_sessions.errors import (
    AgentSessionConflict,
    AgentSessionNotFound,
    InvalidAgentSessionTransition,
)
from conversation_service.agent_sessions.repository import AgentSessionRepository
from conversation_service.db.models import AgentSessionStatus, ConversationAgentSession

S = AgentSessionStatus
# A finished session (COMPLETED, FAILED, ABANDONED) never reopens: the next delegation starts a
# new row, which keeps the history of a conversation's agent work intact.
TRANSITIONS: dict[AgentSessionStatus, frozenset[AgentSessionStatus]] = {
    S.ACTIVE: frozenset({S.AWAITING_USER, S.COMPLETED, S.FAILED, S.ABANDONED}),
    S.AWAITING_USER: frozenset({S.ACTIVE, S.COMPLETED, S.FAILED, S.ABANDONED}),
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset(),
    S.ABANDONED: frozenset(),
}


def allowed_sources(target: AgentSessionStatus) -> list[AgentSessionStatus]:
    return [source for source, targets in TRANSITIONS.items() if target in targets]


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

    async def open_for(self, conversation_id: str) -> ConversationAgentSession | None:
        return await self.repository.get_open_for_conversation(conversation_id)

    async def require(self, row_id: str) -> ConversationAgentSession:
        row = await self.repository.get_by_id(row_id)
        if row is None:
            raise AgentSessionNotFound("no such agent session")
        return row

    async def transition(
        self, row_id: str, target: AgentSessionStatus, *, now: datetime | None = None
    ) -> ConversationAgentSession:
        """Move the session to ``target``; a repeat of the current status only touches it."""
        updated = await self.repository.update_status(
            row_id, target, expected=allowed_sources(target), now=now
        )
        if updated is not None:
            return updated
        current = await self.require(row_id)
        if current.status == target.value:
            touched = await self.repository.touch(row_id, now=now)
            assert touched is not None
            return touched
        raise InvalidAgentSessionTransition(f"{current.status} -> {target.value} is not allowed")

    async def record_agent_session_id(self, row_id: str, agent_session_id: str) -> ConversationAgentSession:
        updated = await self.repository.set_agent_session_id(row_id, agent_session_id)
        if updated is not None:
            return updated
        await self.require(row_id)
        raise AgentSessionConflict("the row is correlated with another agent session already")

    async def touch(self, row_id: str, *, now: datetime | None = None) -> ConversationAgentSession:
        touched = await self.repository.touch(row_id, now=now)
        if touched is None:
            raise AgentSessionNotFound("no such agent session")
        return touched

    async def abandon_stale(self, before: datetime, *, limit: int = 100) -> list[ConversationAgentSession]:
        """Mark open sessions idle since ``before`` as ABANDONED; returns those it changed."""
        abandoned: list[ConversationAgentSession] = []
        for row in await self.repository.list_stale(before, limit):
            # Conditional on what was seen: a session that moved on or was used meanwhile stays.
            changed = await self.repository.update_status(
                row.id,
                AgentSessionStatus.ABANDONED,
                expected=[AgentSessionStatus(row.status)],
                idle_before=before,
            )
            if changed is not None:
                abandoned.append(changed)
        return abandoned
