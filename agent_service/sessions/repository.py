"""All SQL of agent sessions. Callers own the transaction; these only flush."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from agent_service.models import AgentSession
from shared.protocol import SessionStatus


class SessionRepository:
    def __init__(self, db: AsyncSession) -> None:
        self.db = db

    async def get(self, session_id: str) -> AgentSession | None:
        return await self.db.get(AgentSession, session_id)

    async def get_for_update(self, session_id: str) -> AgentSession | None:
        # Row lock on PostgreSQL; SQLite serialises writers anyway.
        result = await self.db.execute(
            select(AgentSession).where(AgentSession.id == session_id).with_for_update()
        )
        return result.scalar_one_or_none()

    def add(self, session: AgentSession) -> None:
        self.db.add(session)

    async def claim(self, session_id: str, run_id: str, now: datetime, values: dict[str, Any]) -> bool:
        """Mark the session ACTIVE for ``run_id`` unless another run holds it; True when claimed."""
        result = await self.db.execute(
            update(AgentSession)
            .where(AgentSession.id == session_id, AgentSession.status != SessionStatus.ACTIVE.value)
            .values(status=SessionStatus.ACTIVE.value, current_run_id=run_id, updated_at=now, **values)
            .execution_options(synchronize_session=False)
        )
        return result.rowcount == 1

    async def update(self, session_id: str, **values: Any) -> None:
        await self.db.execute(
            update(AgentSession)
            .where(AgentSession.id == session_id)
            .values(**values)
            .execution_options(synchronize_session=False)
        )

    async def bump_last_seq(self, session_id: str, seq: int) -> None:
        # Never move backwards: batches of one session are written in order, but be safe anyway.
        await self.db.execute(
            update(AgentSession)
            .where(AgentSession.id == session_id, AgentSession.last_seq < seq)
            .values(last_seq=seq)
            .execution_options(synchronize_session=False)
        )
