"""All SQL on ``conversation_agent_sessions``.

Creation runs in a SAVEPOINT, so the unique-index violation of a concurrent second creation rolls
back only the failed insert: the caller's transaction stays usable and sees a domain error
(``AgentSessionConflict``), never a raw ``IntegrityError``. Status changes are conditional updates
(``WHERE status IN expected``): two writers racing on one row cannot both win.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from datetime import datetime

from sqlalchemy import ColumnElement, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from conversation_service.agent_sessions.errors import AgentSessionConflict, UnknownConversation
from conversation_service.db.models import (
    NON_TERMINAL_AGENT_SESSION_STATUSES,
    AgentSessionStatus,
    ConversationAgentSession,
    utcnow,
)
from conversation_service.db.repository import Repository

_OPEN = [status.value for status in NON_TERMINAL_AGENT_SESSION_STATUSES]


def _domain_error(exc: IntegrityError) -> Exception | None:
    """The domain error for the constraint an IntegrityError broke, read from the driver's message
    (asyncpg names the constraint, SQLite names the columns and says FOREIGN KEY)."""
    text = str(exc.orig).lower() if exc.orig is not None else str(exc).lower()
    if "one_open" in text or "conversation_agent_sessions.conversation_id" in text:
        return AgentSessionConflict("the conversation already has an open agent session")
    if "agent_session_id" in text:
        return AgentSessionConflict("the agent session is already mapped to a conversation")
    if "foreign key" in text or "fk_conversation_agent_sessions_conversation_id" in text:
        return UnknownConversation("no such conversation")
    return None


@asynccontextmanager
async def _savepoint(session: AsyncSession) -> AsyncIterator[None]:
    """A SAVEPOINT whose constraint violation becomes the domain error (an unknown one re-raises)."""
    try:
        async with session.begin_nested():
            yield
    except IntegrityError as exc:
        error = _domain_error(exc)
        if error is None:
            raise
        raise error from None


class AgentSessionRepository(Repository):
    async def create(
        self,
        conversation_id: str,
        *,
        profile_name: str = "default",
        agent_session_id: str | None = None,
        status: AgentSessionStatus = AgentSessionStatus.ACTIVE,
        now: datetime | None = None,
        agent_name: str | None = None,
    ) -> ConversationAgentSession:
        """A new open session row for the conversation.

        Raises ``AgentSessionConflict`` when the conversation already has an open session (or the
        agent session id is mapped already) and ``UnknownConversation`` when it does not exist.
        """
        if status.value not in _OPEN:
            raise ValueError("a session is created open (ACTIVE or AWAITING_USER)")
        now = now or utcnow()
        row = ConversationAgentSession(
            conversation_id=conversation_id,
            agent_session_id=agent_session_id,
            profile_name=profile_name,
            status=status.value,
            created_at=now,
            last_interaction_at=now,
            agent_name=agent_name,
        )
        async with _savepoint(self.session):
            self.session.add(row)
            await self.session.flush()
        return row

    async def get_by_agent_session_id(self, agent_session_id: str) -> ConversationAgentSession | None:
        return await self.session.scalar(
            select(ConversationAgentSession).where(
                ConversationAgentSession.agent_session_id == agent_session_id
            )
        )

    async def get_open_for_conversation(self, conversation_id: str) -> ConversationAgentSession | None:
        return await self.session.scalar(
            select(ConversationAgentSession).where(
                ConversationAgentSession.conversation_id == conversation_id,
                ConversationAgentSession.status.in_(_OPEN),
            )
        )

    async def get_latest_for_conversation(self, conversation_id: str) -> ConversationAgentSession | None:
        """The most recent session of the conversation, open or finished."""
        return await self.session.scalar(
            select(ConversationAgentSession)
            .where(ConversationAgentSession.conversation_id == conversation_id)
            .order_by(ConversationAgentSession.created_at.desc(), ConversationAgentSession.id.desc())
            .limit(1)
        )

    async def update_status(
        self,
        row_id: str,
        status: AgentSessionStatus,
        *,
        expected: Iterable[AgentSessionStatus] | None = None,
        now: datetime | None = None,
        clear_pending_question: bool = False,
    ) -> ConversationAgentSession | None:
        """Set the status (and touch the row) when its current status is one of ``expected`` (any
        open status by default). ``clear_pending_question`` drops the pending question in the same
        statement (a closed status always does). None when the row is missing or does not match."""
        allowed = [s.value for s in expected] if expected is not None else _OPEN
        conditions = [ConversationAgentSession.id == row_id, ConversationAgentSession.status.in_(allowed)]
        values: dict[str, object] = {"status": status.value, "last_interaction_at": now or utcnow()}
        if clear_pending_question or status.value not in _OPEN:
            values["pending_question_id"] = None
        # Reopening a finished session while another one is open breaks the partial index.
        async with _savepoint(self.session):
            return await self._update(*conditions, **values)

    async def set_agent_session_id(
        self, row_id: str, agent_session_id: str
    ) -> ConversationAgentSession | None:
        """Record the Agent Service's session id once it is known. It never changes afterwards:
        None when the row holds another id already (or is missing)."""
        async with _savepoint(self.session):
            return await self._update(
                ConversationAgentSession.id == row_id,
                (ConversationAgentSession.agent_session_id.is_(None))
                | (ConversationAgentSession.agent_session_id == agent_session_id),
                agent_session_id=agent_session_id,
                last_interaction_at=utcnow(),
            )

    async def set_a2a_task_id(self, row_id: str, task_id: str) -> None:
        """The A2A task the conversation's last message started (an answer continues it)."""
        await self.session.execute(
            update(ConversationAgentSession).where(ConversationAgentSession.id == row_id)
            .values(a2a_task_id=task_id).execution_options(synchronize_session=False)
        )

    async def touch(self, row_id: str, *, now: datetime | None = None) -> ConversationAgentSession | None:
        return await self._update(ConversationAgentSession.id == row_id, last_interaction_at=now or utcnow())

    async def advance_event_seq(self, row_id: str, seq: int) -> bool:
        """Remember the highest Agent Service event consumed (the resume point); never moves back."""
        result = await self.session.execute(
            update(ConversationAgentSession)
            .where(ConversationAgentSession.id == row_id, ConversationAgentSession.last_event_seq < seq)
            .values(last_event_seq=seq)
            .execution_options(synchronize_session=False)
        )
        return result.rowcount == 1

    async def set_pending_question(
        self, row_id: str, question_id: str | None
    ) -> ConversationAgentSession | None:
        return await self._update(
            ConversationAgentSession.id == row_id, pending_question_id=question_id, last_interaction_at=utcnow()
        )

    async def _update(self, *conditions: ColumnElement[bool], **values: object) -> ConversationAgentSession | None:
        """The row matching ``conditions`` after setting ``values``; None when none matches."""
        return await self.session.scalar(
            update(ConversationAgentSession)
            .where(*conditions)
            .values(**values)
            .returning(ConversationAgentSession)
            .execution_options(populate_existing=True)
        )
