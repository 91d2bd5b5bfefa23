"""SQL of the agent's pending questions (``pending_interactions``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, update

from conversation_service.db.models import InteractionStatus, PendingInteraction
from conversation_service.db.repository import Repository
from shared.protocol import utcnow


class InteractionRepository(Repository):
    async def add(self, interaction: PendingInteraction) -> PendingInteraction:
        # A replayed ASK_USER (stream resumed) must not create the question twice.
        existing = await self.session.get(PendingInteraction, interaction.question_id)
        if existing is not None:
            return existing
        self.session.add(interaction)
        await self.session.flush()
        return interaction

    async def get(self, question_id: str) -> PendingInteraction | None:
        return await self.session.get(PendingInteraction, question_id)

    async def pending_for_conversation(self, conversation_id: str) -> PendingInteraction | None:
        return await self.session.scalar(
            select(PendingInteraction)
            .where(
                PendingInteraction.conversation_id == conversation_id,
                PendingInteraction.status == InteractionStatus.PENDING.value,
            )
            .order_by(PendingInteraction.asked_at.desc())
            .limit(1)
        )

    async def list_for_conversation(self, conversation_id: str, *, limit: int) -> list[PendingInteraction]:
        """The conversation's last ``limit`` questions, in the order they were asked."""
        result = await self.session.scalars(
            select(PendingInteraction)
            .where(PendingInteraction.conversation_id == conversation_id)
            .order_by(PendingInteraction.asked_at.desc(), PendingInteraction.question_id)
            .limit(limit)
        )
        return list(reversed(result.all()))

    async def mark_answered(self, question_id: str, answer_message_id: str, now: datetime | None = None) -> bool:
        """PENDING -> ANSWERED, once: a second answer finds no pending row and gets False."""
        return await self._settle(
            question_id, status=InteractionStatus.ANSWERED.value, answered_at=now or utcnow(),
            answer_message_id=answer_message_id,
        )

    async def mark_expired(self, question_id: str) -> bool:
        return await self._settle(question_id, status=InteractionStatus.EXPIRED.value)

    async def _settle(self, question_id: str, **values: object) -> bool:
        """Set ``values`` on the question if it is still PENDING; False when it is not (anymore)."""
        result = await self.session.execute(
            update(PendingInteraction)
            .where(
                PendingInteraction.question_id == question_id,
                PendingInteraction.status == InteractionStatus.PENDING.value,
            )
            .values(**values)
        )
        return result.rowcount == 1

    async def claim_expired(self, now: datetime, limit: int) -> list[PendingInteraction]:
        """Expired, still pending questions, locked for this transaction: with ``SKIP LOCKED`` each is
        claimed by one replica on PostgreSQL (SQLite has one writer at a time and ignores it)."""
        query = (
            select(PendingInteraction)
            .where(
                PendingInteraction.status == InteractionStatus.PENDING.value,
                PendingInteraction.expires_at <= now,
            )
            .order_by(PendingInteraction.expires_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        return list((await self.session.scalars(query)).all())
