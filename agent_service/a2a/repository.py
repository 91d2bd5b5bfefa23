"""The SQL of the A2A layer: which runs are tasks. Read-only; the runs' own tables are the truth.

A run is a task (its id the task id) unless it answered a question: then the event just before
its first seq is the ASK_USER of the run it continues (``projection`` says why that holds).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from agent_service.models import AgentEvent, AgentRun, AgentSession
from shared.protocol import EventType

_ENDS = (EventType.ASK_USER.value, EventType.COMPLETE.value, EventType.ERROR.value)


@dataclass(frozen=True, slots=True)
class TaskRow:
    """A task: the run that started it."""

    task_id: str
    context_id: str
    first_seq: int
    created: datetime


class TaskRepository:
    def __init__(self, db: AsyncSession) -> None:
        self.db = db

    async def get(self, task_id: str) -> TaskRow | None:
        run = (await self.db.execute(
            select(AgentRun.id, AgentRun.session_id, AgentRun.first_seq, AgentRun.started_at)
            .where(AgentRun.id == task_id)
        )).one_or_none()
        if run is None:
            return None
        before = (await self.db.execute(
            select(AgentEvent.type)
            .where(AgentEvent.session_id == run.session_id, AgentEvent.seq < run.first_seq)
            .order_by(AgentEvent.seq.desc())
            .limit(1)
        )).scalar_one_or_none()
        if before == EventType.ASK_USER.value:
            return None  # an answer's run: part of the task it answered
        return TaskRow(run.id, run.session_id, run.first_seq, run.started_at)

    async def of_context(self, context_id: str) -> list[TaskRow]:
        """The tasks of a session, oldest first."""
        runs = (await self.db.execute(
            select(AgentRun.id, AgentRun.first_seq, AgentRun.started_at)
            .where(AgentRun.session_id == context_id)
            .order_by(AgentRun.first_seq)
        )).all()
        ends = (await self.db.execute(
            select(AgentEvent.seq, AgentEvent.type)
            .where(AgentEvent.session_id == context_id, AgentEvent.type.in_(_ENDS))
            .order_by(AgentEvent.seq)
        )).all()
        tasks, index, last_end = [], 0, None
        for run in runs:
            while index < len(ends) and ends[index].seq < run.first_seq:
                last_end = ends[index].type
                index += 1
            if last_end != EventType.ASK_USER.value:
                tasks.append(TaskRow(run.id, context_id, run.first_seq, run.started_at))
        return tasks

    async def recent_contexts(self, limit: int) -> list[str]:
        """The sessions updated last, newest first."""
        result = await self.db.execute(
            select(AgentSession.id).order_by(AgentSession.updated_at.desc(), AgentSession.id).limit(limit)
        )
        return list(result.scalars())

    async def context_exists(self, context_id: str) -> bool:
        result = await self.db.execute(select(AgentSession.id).where(AgentSession.id == context_id))
        return result.scalar_one_or_none() is not None
