"""``A2ATaskStream``: an A2A task followed as the chat follows an Agent Service run.

It has the interface of ``agent_client.AgentEventStream`` (``start``, iteration over
``EventEnvelope``, ``aclose``, ``session_id``, ``run_id``, ``last_seq``, ``retries``, ``reconnects``),
so the turn (``AgentDelegation``), its processor and a takeover use it unchanged. Its events come
from the ``TaskFold``; their seqs are the chat's own.

Two phases, as for the Agent Service. Until the first event the stream is a request: failures are
retried by category (the message keeps its ``messageId``, the chat's idempotency key). Once the task
is known, a stream that breaks (the connection cut, an idle timeout, a body that ends before the
task does) is picked up with ``SubscribeToTask``, after 1, 2, 4 s and then every 4 s for the resume
budget: the subscription's first event is the task as it stands, and the fold sends on only the
answer text not delivered yet. A task that ended meanwhile cannot be subscribed to (spec 3.1.6): it
is read with ``GetTask`` and ends the stream the same way. That lifetime (start, time limit,
resumptions, close) is ``agent_client``'s ``ResumableStream``; what is A2A's is here.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, Self

from conversation_service.a2a_agents import wire
from conversation_service.a2a_agents.client import A2AAgentClient, A2AStream
from conversation_service.a2a_agents.fold import TaskFold
from conversation_service.a2a_agents.wire import StatusUpdate, StreamEvent
from conversation_service.agent_client.errors import (
    AgentBadRequestError,
    AgentProtocolError,
    AgentServiceError,
    AgentStreamError,
    AgentTimeoutError,
)
from conversation_service.agent_client.resumable import ResumableStream
from shared.protocol import EventEnvelope

log = logging.getLogger(__name__)


class A2ATaskStream(ResumableStream):
    _name = "the A2A agent's stream"
    _late = "the A2A agent did not answer in time"
    _connection: A2AStream | None

    def __init__(
        self, client: A2AAgentClient, fold: TaskFold, *, message: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """With ``message``: send it and follow the task it starts or continues. Without: subscribe
        to ``fold.task_id`` (a taken-over turn), sending on what ``fold.delivered`` lacks."""
        super().__init__(client.client_config, operation="a2a:" + ("send" if message else "subscribe"),
                         sleep=client.sleep)
        self._client = client
        self.fold = fold
        self._message = message
        self._metadata = metadata
        self._pending: deque[EventEnvelope] = deque()
        self._resumed = False  # read through a subscription: its snapshot may overlap its first events
        self.idempotency_key = message.get("messageId") if message else None

    @property
    def session_id(self) -> str | None:
        return self.fold.context_id

    @property
    def run_id(self) -> str | None:
        return self.fold.task_id

    @property
    def last_seq(self) -> int:
        return self.fold.seq

    def __repr__(self) -> str:
        return f"<A2ATaskStream {self._client.name} task={self.fold.task_id!r} seq={self.fold.seq}>"

    async def _open(self, deadline: float) -> None:
        if self._message is not None:
            self._connection = await self._within(deadline, self._client.send(
                self._message, self._metadata, self._deadline))
        else:
            self._connection = await self._reopen(deadline)  # a taken-over turn
            if self._connection is None:
                return
        event = await self._within(deadline, self._connection.next())
        if event is None:
            raise AgentStreamError("the A2A agent's stream ended before its first event", retryable=True)
        self._pending.extend(self.fold.feed(event))

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> EventEnvelope:
        if not self._started:
            await self.start()
        try:
            while not self._pending:
                if self._finished or self.fold.ended:
                    await self.aclose()
                    raise StopAsyncIteration
                await self._read()
        except StopAsyncIteration:
            raise
        except BaseException:
            await self.aclose()
            raise
        return self._pending.popleft()

    async def _read(self) -> None:
        assert self._connection is not None
        try:
            event = await self._connection.next()
        except AgentProtocolError:
            raise
        except AgentServiceError as exc:
            await self._resume(exc)
            return
        if event is None:
            await self._resume(AgentStreamError("the A2A agent's stream ended before the task did"))
            return
        self._failed_reconnects, self._broken_since = 0, None
        if self._resumed and isinstance(event, StatusUpdate) and event.status.state == wire.COMPLETED:
            event = await self._settled(event)
        self._pending.extend(self.fold.feed(event))

    async def _settled(self, completed: StatusUpdate) -> StreamEvent:
        """The task read whole at its end, after a resume: its own text settles the answer, whatever the
        chunks sent again around the snapshot were (A2A cannot tell them apart); the status update
        itself when the read fails."""
        assert self.fold.task_id is not None
        try:
            task = await self._client.get_task(self.fold.task_id)
        except AgentServiceError:
            log.warning("could not read the A2A task at its end", extra={"a2a_agent": self._client.name})
            return completed
        return task if task.status.state == wire.COMPLETED else completed

    async def _resume(self, cause: AgentServiceError) -> None:
        """Pick the task up again (``_reopen``); past its time limit the stream ends, whatever broke it."""
        if self._deadline is not None and asyncio.get_running_loop().time() >= self._deadline:
            raise AgentTimeoutError(f"{self._name} exceeded its time limit") from cause
        await self._reconnect(cause)

    @property
    def _resumable(self) -> bool:
        return self.fold.task_id is not None

    async def _reopen(self, deadline: float) -> A2AStream | None:
        """``SubscribeToTask``; a task that has ended cannot be subscribed to (``UnsupportedOperationError``,
        spec 3.1.6): it is read whole with ``GetTask`` instead, and there is no stream (None)."""
        assert self.fold.task_id is not None
        self._resumed = True
        try:
            return await self._within(deadline, self._client.subscribe(self.fold.task_id, self._deadline))
        except AgentBadRequestError:
            self._pending.extend(self.fold.feed(await self._client.get_task(self.fold.task_id)))
            return None

    def _reconnecting(self, delay: float, cause: AgentServiceError) -> None:
        log.warning("A2A stream broke, resuming the task", extra={
            "a2a_agent": self._client.name, "attempt": self._failed_reconnects, "delay_s": delay,
            "error_type": type(cause).__name__})
