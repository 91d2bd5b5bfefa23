"""Reading tasks: finding one, and folding its events (``projection``) from the log and the live run.

The events of a run this process executes reach the log one group commit late, so a read takes
the run's not-yet-written events too, as the SSE replay does: subscribe (which hands over a
snapshot of them), read the log, merge by seq. A task read this way holds every event up to its
``last_seq``; what follows is for ``EventStreamer.serve(after=last_seq)`` to stream.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.ext.asyncio import async_sessionmaker

from agent_service.a2a.errors import TaskNotFound
from agent_service.a2a.projection import TaskProjection
from agent_service.a2a.repository import Context, TaskRepository, TaskRow
from agent_service.access.caller import Caller, Visibility
from agent_service.events.event_log import EventLog
from agent_service.repository import EventRepository
from shared.protocol import EventEnvelope

_PAGE = 500


class TaskReader:
    def __init__(self, sessionmaker: async_sessionmaker, event_log: EventLog) -> None:
        self._sessionmaker = sessionmaker
        self._log = event_log

    async def locate(self, task_id: str, caller: Caller) -> TaskRow:
        """The task, if it exists and ``caller`` may see it; else TaskNotFound either way (spec 3.3.2:
        the existence of another's task is not revealed)."""
        async with self._sessionmaker() as db:
            row = await TaskRepository(db).get(task_id)
        if row is None or not caller.may_see(row.owner):
            raise TaskNotFound(f"no task {task_id!r}", taskId=task_id)
        return row

    async def read(self, row: TaskRow, upto: int | None = None) -> TaskProjection:
        """The task as its events up to ``upto`` (default: all so far) make it."""
        projection = TaskProjection(
            task_id=row.task_id, context_id=row.context_id, created=row.created, session_id=row.session_id,
        )
        await self.fold(projection, row.first_seq - 1, upto)
        return projection

    async def fold(self, projection: TaskProjection, after: int, upto: int | None = None) -> None:
        """Apply the events of the task's session after ``after`` (and up to ``upto``), until
        the task ends."""

        def take(env: EventEnvelope) -> bool:
            if upto is not None and env.seq > upto:
                return False
            projection.apply(env)
            return not projection.terminal

        await self._each(projection.session_id, after, take)

    async def _each(self, session_id: str, after: int, take: Callable[[EventEnvelope], bool]) -> None:
        """Hand the session's events after ``after`` to ``take`` in seq order, while it wants more."""
        sub, _, unflushed = self._log.subscribe(session_id)
        try:
            pending = {item.envelope.seq: item.envelope for item in unflushed if item.envelope.seq > after}
            last = after
            while True:
                async with self._sessionmaker() as db:
                    page = await EventRepository(db).after(session_id, last, _PAGE)
                for env in page:
                    pending.pop(env.seq, None)
                    if not take(env):
                        return
                    last = env.seq
                if len(page) < _PAGE:
                    break
            for seq in sorted(pending):
                if seq > last and not take(pending[seq]):
                    return
        finally:
            if sub is not None:
                self._log.unsubscribe(session_id, sub)

    async def of_context(self, context: Context) -> list[TaskProjection]:
        async with self._sessionmaker() as db:
            rows = await TaskRepository(db).of_context(context)
        return [await self.read(row) for row in rows]

    async def recent_contexts(self, limit: int, caller: Caller) -> list[Context]:
        """The contexts ``caller`` may see, updated last first."""
        async with self._sessionmaker() as db:
            return await TaskRepository(db).recent_contexts(limit, Visibility.of(caller))

    async def context(self, context_id: str, caller: Caller) -> Context | None:
        """The context ``caller`` calls ``context_id``: a session it may see (None: it has none by that id)."""
        async with self._sessionmaker() as db:
            return await TaskRepository(db).context(context_id, Visibility.of(caller))

    async def context_taken(self, context_id: str) -> bool:
        """Whether some session already has ``context_id`` as its id."""
        async with self._sessionmaker() as db:
            return await TaskRepository(db).session_exists(context_id)
