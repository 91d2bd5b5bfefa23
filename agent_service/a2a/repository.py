"""The SQL of the A2A layer: which runs are tasks. Read-only; the runs' own tables are the truth.

A run is a task (its id the task id) unless it answered a question: then the event just before
its first seq is the ASK_USER of the run it continues (``projection`` says why that holds).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, or_, select, true
from sqlalchemy.ext.asyncio import AsyncSession

from agent_service.access.caller import Owner, Visibility
from agent_service.models import AgentEvent, AgentRun, AgentSession
from shared.protocol import EventType

_ENDS = (EventType.ASK_USER.value, EventType.COMPLETE.value, EventType.ERROR.value)


@dataclass(frozen=True, slots=True)
class TaskRow:
    """A task: the run that started it, and who its context (session) belongs to."""

    task_id: str
    context_id: str
    first_seq: int
    created: datetime
    owner: Owner


_OWNER = (AgentSession.owner, AgentSession.user_id, AgentSession.org_id)


def visible_to(visibility: Visibility):
    """The sessions (contexts) a caller may see, as a WHERE clause (``Caller.may_see`` in SQL)."""
    if visibility.by_user:
        return and_(_null_safe(AgentSession.user_id, visibility.user_id), _null_safe(AgentSession.org_id, visibility.org_id))
    conditions = []
    if visibility.principal is not None:
        conditions.append(AgentSession.owner == visibility.principal)
    if visibility.orgs is not None:
        conditions.append(or_(AgentSession.org_id.is_(None), AgentSession.org_id.in_(sorted(visibility.orgs))))
    return and_(true(), *conditions)


def _null_safe(column, value: str | None):
    return column.is_(None) if value is None else column == value


class TaskRepository:
    def __init__(self, db: AsyncSession) -> None:
        self.db = db

    async def get(self, task_id: str) -> TaskRow | None:
        run = (await self.db.execute(
            select(AgentRun.id, AgentRun.session_id, AgentRun.first_seq, AgentRun.started_at, *_OWNER)
            .join(AgentSession, AgentSession.id == AgentRun.session_id)
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
        return TaskRow(run.id, run.session_id, run.first_seq, run.started_at, Owner(run.owner, run.user_id, run.org_id))

    async def of_context(self, context_id: str, owner: Owner) -> list[TaskRow]:
        """The tasks of a session (whose owner is ``owner``), oldest first."""
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
                tasks.append(TaskRow(run.id, context_id, run.first_seq, run.started_at, owner))
        return tasks

    async def recent_contexts(self, limit: int, visibility: Visibility) -> list[tuple[str, Owner]]:
        """The sessions ``visibility`` lets a caller see, updated last first, with their owners."""
        result = await self.db.execute(
            select(AgentSession.id, *_OWNER).where(visible_to(visibility))
            .order_by(AgentSession.updated_at.desc(), AgentSession.id).limit(limit)
        )
        return [(row.id, Owner(row.owner, row.user_id, row.org_id)) for row in result]

    async def context_owner(self, context_id: str) -> Owner | None:
        """Who a session belongs to (None: there is no such session)."""
        row = (await self.db.execute(select(*_OWNER).where(AgentSession.id == context_id))).one_or_none()
        return None if row is None else Owner(row.owner, row.user_id, row.org_id)
