"""SendStreamingMessage and SubscribeToTask: a task's events as A2A stream responses over SSE.

Both are ``EventStreamer.serve`` with the A2A encoding (``TaskProjection.apply``), so they replay
from the durable log and then follow the live run (in this process, or another replica's through
the log) exactly as the Agent Service's own event stream does.

What A2A lacks and this adds (the resume extension of the Agent Card): ``SubscribeToTask`` has no
cursor, so a subscriber that was cut off would get a fresh snapshot and could not tell what it
missed. Every SSE event here carries ``id: <seq>`` (on the last frame of an event, so a cut inside
one event resends it whole) and the seq in its ``metadata``; a ``SubscribeToTask`` with
``Last-Event-ID: <seq>`` gets no snapshot but every event of the task after that seq, once, in
order, then the live ones, also after the task ended and also after an Agent Service restart. A
subscription follows the task across its questions: it ends only at a terminal state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from agent_service.a2a.errors import UnsupportedOperation
from agent_service.a2a.projection import StreamResponse, TaskProjection
from agent_service.a2a.repository import TaskRow
from agent_service.a2a.schemas import SendMessageRequest, SubscribeToTaskRequest
from agent_service.a2a.service import A2AService
from agent_service.access.caller import Caller
from agent_service.events.event_log import EventLog
from agent_service.sessions.service import SessionService
from shared.protocol import EventEnvelope, SessionStatus
from shared.sse import encode_comment

# One stream response as one SSE event of the binding; ``seq``: its ``id:`` (None: no id line).
Frame = Callable[[StreamResponse, int | None], bytes]
Write = Callable[[bytes], Awaitable[None]]
Serve = Callable[[Write, asyncio.Event], Awaitable[None]]
_HEARTBEAT = encode_comment("heartbeat")


def encoder(projection: TaskProjection, frame: Frame, ended: asyncio.Event | None = None):
    """``encode`` for ``EventStreamer.serve``: each event as the stream responses it is for the task."""

    def encode(env: EventEnvelope) -> bytes:
        responses = projection.apply(env)
        if ended is not None and projection.terminal:
            ended.set()
        last = len(responses) - 1
        return b"".join(frame(response, env.seq if i == last else None) for i, response in enumerate(responses))

    return encode


class TaskStreams:
    def __init__(
        self, service: A2AService, sessions: SessionService, event_log: EventLog, *, heartbeat_s: float,
        stopping: asyncio.Event,
    ) -> None:
        self._service = service
        self._sessions = sessions
        self._log = event_log
        self._heartbeat_s = heartbeat_s
        self._stopping = stopping

    async def send(self, request: SendMessageRequest, frame: Frame, caller: Caller) -> Serve:
        """SendStreamingMessage: the Task first, then its updates until the run ends or asks for input."""
        started = await self._service.start(request, caller)
        projection, handle = started.projection, started.handle
        history_length = request.configuration.history_length

        async def serve(write: Write, disconnected: asyncio.Event) -> None:
            await write(frame({"task": projection.task(history_length)}, None))
            await self._service.streamer.serve(
                write, handle.session_id, handle.first_seq - 1, until_run=handle.run_id, live=handle.live,
                disconnected=disconnected, encode=encoder(projection, frame),
            )

        return serve

    async def subscribe(
        self, request: SubscribeToTaskRequest, frame: Frame, last_event_id: int | None, caller: Caller,
    ) -> Serve:
        """SubscribeToTask: the Task now, then every update until a terminal state; with
        ``last_event_id``, every update after that seq instead of the Task."""
        reader = self._service.reader
        row = await reader.locate(request.id, caller)
        projection = await reader.read(row, upto=last_event_id)
        first = b""
        if last_event_id is None:
            if projection.terminal:
                raise UnsupportedOperation(
                    f"task {row.task_id} is {projection.state.value}: a finished task has no updates to "
                    "subscribe to; GetTask reads it", taskId=row.task_id,
                )
            first = frame({"task": projection.task()}, projection.last_seq or None)
        after = max(row.first_seq - 1, projection.last_seq, last_event_id or 0)

        async def serve(write: Write, disconnected: asyncio.Event) -> None:
            if first:
                await write(first)
            await self._until_end(write, row, projection, after, frame, disconnected, caller)

        return serve

    async def _until_end(
        self, write: Write, row: TaskRow, projection: TaskProjection, after: int, frame: Frame,
        disconnected: asyncio.Event, caller: Caller,
    ) -> None:
        ended = asyncio.Event()
        relay = asyncio.create_task(_relay(disconnected, ended), name="a2a-subscriber-disconnect")
        try:
            encode = encoder(projection, frame, ended)
            while not projection.terminal and not ended.is_set() and not self._stopping.is_set():
                await self._service.streamer.serve(write, row.session_id, after, disconnected=ended, encode=encode)
                after = max(after, projection.last_seq)
                if projection.terminal or ended.is_set():
                    return
                # The task waits for input: its next run starts when the answer comes.
                await self._next_run(write, row.session_id, after, ended, caller)
        finally:
            relay.cancel()

    async def _next_run(self, write: Write, session_id: str, after: int, ended: asyncio.Event, caller: Caller) -> None:
        """Wait until the session has events after ``after`` or a run again (or the stream ends)."""
        with self._log.notifier.watch(session_id) as watch:
            while not ended.is_set() and not self._stopping.is_set():
                if self._log.channel(session_id) is not None:
                    return
                status = await self._sessions.status(session_id, caller)
                if status.last_seq > after or status.status is SessionStatus.ACTIVE:
                    return
                if not await _wait_any([watch.changed, ended, self._stopping], self._heartbeat_s):
                    await write(_HEARTBEAT)
                watch.clear()


async def _relay(source: asyncio.Event, target: asyncio.Event) -> None:
    await source.wait()
    target.set()


async def _wait_any(events: list[asyncio.Event], timeout: float) -> bool:
    """Whether one of ``events`` was set within ``timeout``."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        done, _ = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        return bool(done)
    finally:
        for waiter in waiters:
            waiter.cancel()
