"""All SQL of runs and of the event log. Callers own the transaction; these only flush."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from agent_service.models import AgentEvent, AgentRun
from shared.protocol import EventEnvelope, EventType, SessionStatus


class RunRepository:
    def __init__(self, db: AsyncSession) -> None:
        self.db = db

    def add(self, run: AgentRun) -> None:
        self.db.add(run)

    async def get(self, run_id: str) -> AgentRun | None:
        return await self.db.get(AgentRun, run_id)

    async def get_by_idempotency_key(self, key: str) -> AgentRun | None:
        result = await self.db.execute(select(AgentRun).where(AgentRun.idempotency_key == key))
        return result.scalar_one_or_none()

    async def finish(
        self, run_id: str, *, status: str, ended_at: datetime, error_code: str | None = None,
        usage: dict[str, Any] | None = None,
    ) -> None:
        await self.db.execute(
            update(AgentRun)
            .where(AgentRun.id == run_id)
            .values(status=status, ended_at=ended_at, error_code=error_code, usage=usage)
            .execution_options(synchronize_session=False)
        )

    async def finish_active_for_session(self, session_id: str, *, status: str, error_code: str, ended_at: datetime) -> None:
        await self.db.execute(
            update(AgentRun)
            .where(AgentRun.session_id == session_id, AgentRun.status == SessionStatus.ACTIVE.value)
            .values(status=status, error_code=error_code, ended_at=ended_at)
            .execution_options(synchronize_session=False)
        )

    async def count_for_session(self, session_id: str) -> int:
        result = await self.db.execute(select(func.count()).select_from(AgentRun).where(AgentRun.session_id == session_id))
        return int(result.scalar_one())


class EventRepository:
    def __init__(self, db: AsyncSession) -> None:
        self.db = db

    async def insert_many(self, envelopes: Sequence[EventEnvelope]) -> None:
        if not envelopes:
            return
        await self.db.execute(
            insert(AgentEvent),
            [
                {
                    "session_id": env.session_id,
                    "seq": env.seq,
                    "run_id": env.run_id,
                    "type": env.type.value,
                    "ts": env.ts,
                    "data": env.data,
                }
                for env in envelopes
            ],
        )

    async def after(self, session_id: str, after_seq: int, limit: int) -> list[EventEnvelope]:
        result = await self.db.execute(
            select(AgentEvent)
            .where(AgentEvent.session_id == session_id, AgentEvent.seq > after_seq)
            .order_by(AgentEvent.seq)
            .limit(limit)
        )
        return [
            EventEnvelope(
                session_id=row.session_id, run_id=row.run_id, seq=row.seq, type=EventType(row.type), ts=row.ts,
                data=row.data,
            )
            for row in result.scalars()
        ]
