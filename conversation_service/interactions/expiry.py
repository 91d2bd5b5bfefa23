"""Expiry of unanswered ASK_USER questions (spec Risk 3).

An expired question is EXPIRED, its agent session ABANDONED, its conversation no longer awaiting
the user, and the user is told, exactly once whoever notices first: an answer that came too late,
a chat message sent after the deadline, or the cleanup job that runs in every replica. The job
claims due questions with ``FOR UPDATE SKIP LOCKED`` (on PostgreSQL), so replicas running at the
same moment split the rows between them.
"""

from __future__ import annotations

import logging

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from conversation_service.agent_sessions.repository import AgentSessionRepository
from conversation_service.conversations.repository import ConversationRepository
from conversation_service.db.models import AgentSessionStatus, PendingInteraction
from conversation_service.interactions.repository import InteractionRepository
from conversation_service.metrics import AgentMetrics
from conversation_service.realtime.frames import Notice
from conversation_service.realtime.publisher import FramePublisher
from shared.protocol import utcnow
from shared.transactions import transaction

log = logging.getLogger(__name__)

QUESTION_EXPIRED_NOTICE = "Agent question expired, starting fresh conversation"


class QuestionExpiry:
    def __init__(
        self, sessionmaker: async_sessionmaker, publisher: FramePublisher, metrics: AgentMetrics, *, batch: int
    ) -> None:
        self._sessionmaker = sessionmaker
        self._publisher = publisher
        self._metrics = metrics
        self._batch = batch

    async def expire(self, question: PendingInteraction | None = None) -> list[str]:
        """Expire ``question`` if it is still pending or, without one, up to ``batch`` questions whose
        time is up. Returns the ids this call expired (not those another caller got to first)."""
        async with transaction(self._sessionmaker) as session:
            due = [question] if question is not None else await InteractionRepository(session).claim_expired(
                utcnow(), self._batch)
            expired = [q for q in due if await _abandon(session, q)]
        for q in expired:
            self._metrics.questions["expired"].inc()
            await self._publisher.emit(
                q.conversation_id, Notice("agent_question_expired", QUESTION_EXPIRED_NOTICE, q.question_id),
                boundary=True,
            )
        return [q.question_id for q in expired]

    async def expire_all_due(self) -> list[str]:
        """The cleanup job's pass: every question due now, a batch at a time."""
        handled: list[str] = []
        while True:
            batch = await self.expire()
            handled.extend(batch)
            if len(batch) < self._batch:
                if handled:
                    log.info("expired agent questions", extra={"count": len(handled)})
                return handled


async def _abandon(session: AsyncSession, question: PendingInteraction) -> bool:
    if not await InteractionRepository(session).mark_expired(question.question_id):
        return False
    await AgentSessionRepository(session).update_status(
        question.agent_session_row_id, AgentSessionStatus.ABANDONED,
        expected=[AgentSessionStatus.AWAITING_USER, AgentSessionStatus.ACTIVE],
    )
    await ConversationRepository(session).set_agent_status(question.conversation_id, None)
    return True
