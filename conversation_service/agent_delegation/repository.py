"""SQL of agent delegation's dead letters: delegations that failed, kept to analyse or replay."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select, update

from conversation_service.db.models import DeadLetter
from conversation_service.db.repository import Repository


class DeadLetterRepository(Repository):
    async def add(
        self,
        *,
        conversation_id: str,
        message_id: str | None,
        agent_session_id: str | None,
        error_code: str,
        error_detail: str,
        payload: dict[str, Any] | None,
        attempts: int,
    ) -> DeadLetter:
        letter = DeadLetter(
            conversation_id=conversation_id, message_id=message_id, agent_session_id=agent_session_id,
            error_code=error_code, error_detail=error_detail[:2000], payload=payload, attempts=attempts,
        )
        self.session.add(letter)
        await self.session.flush()
        return letter

    async def get(self, letter_id: str) -> DeadLetter | None:
        return await self.session.get(DeadLetter, letter_id)

    async def newest(self, limit: int, *, pending_only: bool = False) -> list[DeadLetter]:
        query = select(DeadLetter).order_by(DeadLetter.created_at.desc(), DeadLetter.id).limit(limit)
        if pending_only:
            query = query.where(DeadLetter.replayed_at.is_(None))
        return list((await self.session.scalars(query)).all())

    async def claim_replay(self, letter_id: str, now: datetime) -> bool:
        """Mark the letter as being replayed, unless it already is (or was): one conditional UPDATE,
        so of two operators replaying at once exactly one gets True, on SQLite and PostgreSQL."""
        result = await self.session.execute(
            update(DeadLetter)
            .where(DeadLetter.id == letter_id, DeadLetter.replayed_at.is_(None))
            .values(replayed_at=now)
        )
        return result.rowcount == 1

    async def record_replay(self, letter_id: str, outcome: str, detail: str) -> None:
        await self.session.execute(
            update(DeadLetter).where(DeadLetter.id == letter_id).values(replay_outcome=outcome, replay_detail=detail)
        )

    async def written_since(self, message_id: str, since: datetime) -> list[DeadLetter]:
        """Letters of ``message_id`` written at or after ``since`` (by a replay that failed again)."""
        query = (
            select(DeadLetter)
            .where(DeadLetter.message_id == message_id, DeadLetter.created_at >= since)
            .order_by(DeadLetter.created_at)
        )
        return list((await self.session.scalars(query)).all())
