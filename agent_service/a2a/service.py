"""The A2A operations on top of the runs and sessions: ``A2AService``.

A message without ``taskId`` starts a task: a run, in the session its ``contextId`` names (a new
one under that id if there is none, a new one with a generated id without it). A message with the
``taskId`` of a task waiting for input answers its question: the paused run resumes as a new run
of the same task. Nothing is stored besides what the runs store; every answer is read back from
the event log (``reader``).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from agent_service.a2a.context import inbound_message_id
from agent_service.a2a.errors import (
    InvalidParams,
    TaskNotCancelable,
    UnsupportedOperation,
    from_service_error,
)
from agent_service.a2a.inbound import approval_of, check_request, message_text, skill_of, user_of
from agent_service.a2a.projection import TaskProjection
from agent_service.a2a.reader import TaskReader
from agent_service.a2a.repository import TaskRow
from agent_service.a2a.schemas import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SendMessageRequest,
    TaskState,
)
from agent_service.access.caller import Caller, CallerKind
from agent_service.errors import AgentServiceError, NothingToCancel
from agent_service.events.event_log import EventLog
from agent_service.events.streaming import EventStreamer
from agent_service.runs.schemas import RunHandle
from agent_service.runs.service import RunService
from agent_service.sessions.service import SessionService
from agent_service.settings import AgentServiceSettings
from shared.protocol import Answer, EventEnvelope, ExecuteRequest, UserContext, utcnow

# ListTasks without a contextId looks at the tasks of this many sessions, updated last first.
RECENT_CONTEXTS = 100


@dataclass(frozen=True, slots=True)
class Started:
    """A run a message started: its task, as it stood before the run, and the run to follow."""

    row: TaskRow
    projection: TaskProjection
    handle: RunHandle


async def _discard(_: bytes) -> None:
    return None


def _nothing(_: EventEnvelope) -> bytes:
    return b""


class A2AService:
    def __init__(
        self, *, settings: AgentServiceSettings, runs: RunService, sessions: SessionService, reader: TaskReader,
        streamer: EventStreamer, event_log: EventLog,
    ) -> None:
        self._settings = settings
        self._runs = runs
        self._sessions = sessions
        self.reader = reader
        self.streamer = streamer
        self._log = event_log

    # --- SendMessage ---------------------------------------------------------------------------

    async def start(self, request: SendMessageRequest, caller: Caller) -> Started:
        """Start the run a message asks for (a new task, or the answer to a task's question), for the
        user ``caller`` may act for (metadata ``userId``/``orgId`` name one: a service's user; an agent
        and a user token act as themselves)."""
        check_request(request)
        token = inbound_message_id.set(request.message.message_id)
        try:
            if request.message.task_id is not None:
                return await self._answer(request, caller)
            return await self._begin(request, caller)
        except AgentServiceError as exc:
            raise from_service_error(exc) from None
        finally:
            inbound_message_id.reset(token)

    async def _begin(self, request: SendMessageRequest, caller: Caller) -> Started:
        """A new task: in the caller's context of the message's ``contextId`` if it has one, else in a
        new context of that name (under an id of its own where another's session has that id)."""
        name = request.message.context_id
        context = await self.reader.context(name, caller) if name is not None else None
        new_session_id = named = None
        if context is None and name is not None:
            if await self.reader.context_taken(name):
                named = name
            else:
                new_session_id = name
        user = caller.acting_for(self._requested_user(request, caller))
        execute = ExecuteRequest(
            session_id=context.session_id if context is not None else None,
            profile_name=skill_of(request, self._settings.a2a_profile),
            message=message_text(request.message, self._settings.a2a_file_types), user_context=user,
        )
        handle = await self._runs.execute(execute, None, caller, new_session_id=new_session_id, context_id=named)
        context_id = context.context_id if context is not None else named or handle.session_id
        row = TaskRow(handle.run_id, handle.session_id, context_id, handle.first_seq, utcnow(), caller.owner_of(user))
        projection = TaskProjection(task_id=row.task_id, context_id=context_id, created=row.created, session_id=row.session_id)
        return Started(row, projection, handle)

    def _requested_user(self, request: SendMessageRequest, caller: Caller) -> UserContext | None:
        """The user the metadata names: where it names an organisation only, a service's configured
        A2A user, an agent or a user itself; a service naming no one acts for the configured A2A user."""
        default = caller.name if caller.kind is CallerKind.AGENT else caller.user_id or self._settings.a2a_user_id
        user = user_of(request, default)
        if user is None and caller.kind is CallerKind.SERVICE:
            return UserContext(user_id=default)
        return user

    async def _answer(self, request: SendMessageRequest, caller: Caller) -> Started:
        message = request.message
        row = await self.reader.locate(message.task_id or "", caller)
        if message.context_id is not None and message.context_id != row.context_id:
            raise InvalidParams(
                f"contextId {message.context_id!r} is not the context of task {row.task_id!r}; "
                "leave it out or send the task's own", taskId=row.task_id,
            )
        projection = await self.reader.read(row)
        if projection.terminal:
            raise UnsupportedOperation(
                f"task {row.task_id} is {projection.state.value} and takes no more messages; "
                "send one without taskId to start a new task in the same context", taskId=row.task_id,
            )
        if projection.state is not TaskState.INPUT_REQUIRED or projection.question_id is None:
            raise UnsupportedOperation(
                f"task {row.task_id} is {projection.state.value}: it takes a message only when it asks "
                "for input (TASK_STATE_INPUT_REQUIRED); wait for it or cancel it", taskId=row.task_id,
            )
        answer = Answer(question_id=projection.question_id, text=message_text(message, self._settings.a2a_file_types), approved=approval_of(message))
        execute = ExecuteRequest(
            session_id=row.session_id, profile_name=self._settings.a2a_profile, answer=answer,
            user_context=caller.acting_for(self._requested_user(request, caller)),
        )
        handle = await self._runs.execute(execute, None, caller)
        return Started(row, projection, handle)

    async def send(self, request: SendMessageRequest, caller: Caller) -> dict[str, Any]:
        """SendMessage: the task once its run ended or asked for input (blocking, the default), or
        as it is at once (``returnImmediately``). A run the agent ended with a direct reply answers
        a client that waited with that reply, a Message (which names its task: runs are durable)."""
        started = await self.start(request, caller)
        handle = started.handle
        waited = not request.configuration.return_immediately
        if not waited:
            if handle.live is not None:
                self._log.unsubscribe(handle.session_id, handle.live)
        else:
            await self.streamer.serve(
                _discard, handle.session_id, handle.first_seq - 1, until_run=handle.run_id, live=handle.live,
                encode=_nothing,
            )
        projection = await self.reader.read(started.row)
        reply = projection.reply() if waited else None
        if reply is not None:
            return {"message": reply}
        return {"task": projection.task(request.configuration.history_length)}

    # --- GetTask, CancelTask, ListTasks --------------------------------------------------------

    async def get(self, request: GetTaskRequest, caller: Caller) -> dict[str, Any]:
        projection = await self.reader.read(await self.reader.locate(request.id, caller))
        return projection.task(request.history_length)

    async def cancel(self, request: CancelTaskRequest, caller: Caller) -> dict[str, Any]:
        row = await self.reader.locate(request.id, caller)
        projection = await self.reader.read(row)
        if projection.terminal:
            raise TaskNotCancelable(f"task {row.task_id} is {projection.state.value} already", taskId=row.task_id)
        try:
            await self._sessions.cancel(row.session_id, caller)
        except NothingToCancel:
            pass  # it ended meanwhile: the task says how
        except AgentServiceError as exc:
            raise from_service_error(exc) from None
        projection = await self.reader.read(row)
        if projection.terminal and projection.state is not TaskState.CANCELED:
            raise TaskNotCancelable(f"task {row.task_id} ended {projection.state.value} first", taskId=row.task_id)
        # Not terminal yet: another replica executes the run and ends it at its next lease renewal.
        return projection.task()

    async def list(self, request: ListTasksRequest, caller: Caller) -> dict[str, Any]:
        """The caller's tasks only (spec 3.1.4, 13.1): of its contexts, or of the one it names if it
        may see it (another's context lists nothing, as one that does not exist)."""
        if request.context_id is not None:
            context = await self.reader.context(request.context_id, caller)
            contexts = [context] if context is not None else []
        else:
            contexts = await self.reader.recent_contexts(RECENT_CONTEXTS, caller)
        tasks = [task for context in contexts for task in await self.reader.of_context(context)]
        tasks = [task for task in tasks if _matches(task, request)]
        tasks.sort(key=_order, reverse=True)
        if request.page_token:
            after = _decode_token(request.page_token)
            tasks_after = [task for task in tasks if _order(task) < after]
        else:
            tasks_after = tasks
        page = tasks_after[: request.page_size]
        more = len(tasks_after) > len(page)
        return {
            "tasks": [task.task(request.history_length, artifacts=request.include_artifacts) for task in page],
            "nextPageToken": _encode_token(_order(page[-1])) if more else "",
            "pageSize": request.page_size,
            "totalSize": len(tasks),
        }


def _status_time(task: TaskProjection) -> datetime:
    return task.status_ts or task.created


def _order(task: TaskProjection) -> tuple[float, str]:
    # Most recently updated first (spec 3.1.4); the task id breaks ties, so pages never overlap.
    return (_status_time(task).timestamp(), task.task_id)


def _matches(task: TaskProjection, request: ListTasksRequest) -> bool:
    if request.status is not None and task.state is not request.status:
        return False
    return request.status_timestamp_after is None or _status_time(task) > request.status_timestamp_after


def _encode_token(key: tuple[float, str]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(list(key))).decode()


def _decode_token(token: str) -> tuple[float, str]:
    try:
        at, task_id = orjson.loads(base64.urlsafe_b64decode(token.encode()))
        if isinstance(at, int | float) and isinstance(task_id, str):
            return (float(at), task_id)
    except (ValueError, TypeError, binascii.Error, orjson.JSONDecodeError):
        pass
    raise InvalidParams("pageToken is not one this server gave out; start again without it")

