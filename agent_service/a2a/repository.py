"""The SQL of the A2A layer: which runs are tasks, and which session a caller's context is. Read-only;
the runs' own tables are the truth.

A context is a session. Its id is the session's, unless a client chose an id another caller's session
already had: then the session has an id of its own and keeps the client's in ``context_id``, so that
context ids never tell one caller of another's (A2A 3.3.2: the existence of what a client may not see is
not revealed) and two callers may use the same name.

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
class Context:
    """A context as its client names it, the session that holds it, and who that belongs to."""

    context_id: str
    session_id: str
    owner: Owner


@dataclass(frozen=True, slots=True)
class TaskRow:
    """A task: the run that started it, and its context."""

    task_id: str
    session_id: str
    context_id: str
    first_seq: int
    created: datetime
    owner: Owner


_OWNER = (AgentSession.owner, AgentSession.user_id, AgentSession.org_id)
_CONTEXT = (AgentSession.id, AgentSession.context_id, *_OWNER)


def _context(row) -> Context:
    return Context(row.context_id or row.id, row.id, Owner(row.owner, row.user_id, row.org_id))


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
            select(AgentRun.id.label("run_id"), AgentRun.first_seq, AgentRun.started_at, *_CONTEXT)
            .join(AgentSession, AgentSession.id == AgentRun.session_id)
            .where(AgentRun.id == task_id)
        )).one_or_none()
        if run is None:
            return None
        before = (await self.db.execute(
            select(AgentEvent.type)
            .where(AgentEvent.session_id == run.id, AgentEvent.seq < run.first_seq)
            .order_by(AgentEvent.seq.desc())
            .limit(1)
        )).scalar_one_or_none()
        if before == EventType.ASK_USER.value:
            return None  # an answer's run: part of the task it answered
        context = _context(run)
        return TaskRow(run.run_id, context.session_id, context.context_id, run.first_seq, run.started_at, context.owner)

    async def of_context(self, context: Context) -> list[TaskRow]:
        """The tasks of a context, oldest first."""
        session_id = context.session_id
        runs = (await self.db.execute(
            select(AgentRun.id, AgentRun.first_seq, AgentRun.started_at)
            .where(AgentRun.session_id == session_id)
            .order_by(AgentRun.first_seq)
        )).all()
        ends = (await self.db.execute(
            select(AgentEvent.seq, AgentEvent.type)
            .where(AgentEvent.session_id == session_id, AgentEvent.type.in_(_ENDS))
            .order_by(AgentEvent.seq)
        )).all()
        tasks, index, last_end = [], 0, None
        for run in runs:
            while index < len(ends) and ends[index].seq < run.first_seq:
                last_end = ends[index].type
                index += 1
            if last_end != EventType.ASK_USER.value:
                tasks.append(TaskRow(run.id, session_id, context.context_id, run.first_seq, run.started_at, context.owner))
        return tasks

    async def recent_contexts(self, limit: int, visibility: Visibility) -> list[Context]:
        """The contexts ``visibility`` lets a caller see, updated last first."""
        result = await self.db.execute(
            select(*_CONTEXT).where(visible_to(visibility))
            .order_by(AgentSession.updated_at.desc(), AgentSession.id).limit(limit)
        )
        return [_context(row) for row in result]

    async def context(self, context_id: str, visibility: Visibility) -> Context | None:
        """The caller's context of that name: the session with that id if it may see it, else its
        session that keeps that name (``context_id``)."""
        result = await self.db.execute(
            select(*_CONTEXT)
            .where(or_(AgentSession.id == context_id, AgentSession.context_id == context_id), visible_to(visibility))
            # The session with the id first: a name the caller chose while it was free.
            .order_by((AgentSession.id == context_id).desc())
            .limit(1)
        )
        row = result.one_or_none()
        return None if row is None else _context(row)

    async def session_exists(self, session_id: str) -> bool:
        result = await self.db.execute(select(AgentSession.id).where(AgentSession.id == session_id))
        return result.scalar_one_or_none() is not None
