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
is read with ``GetTask`` and ends the stream the same way.
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
from conversation_service.agent_client.retry import RetryEvent, call_with_retries, reconnect_delay, within
from shared.protocol import EventEnvelope

log = logging.getLogger(__name__)


class A2ATaskStream:
    def __init__(
        self, client: A2AAgentClient, fold: TaskFold, *, message: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """With ``message``: send it and follow the task it starts or continues. Without: subscribe
        to ``fold.task_id`` (a taken-over turn), sending on what ``fold.delivered`` lacks."""
        self._client = client
        self._config = client.client_config
        self.fold = fold
        self._message = message
        self._metadata = metadata
        self._connection: A2AStream | None = None
        self._pending: deque[EventEnvelope] = deque()
        self._deadline: float | None = None
        self._started = False
        self._finished = False
        self._failed_reconnects = 0
        self._broken_since: float | None = None
        self._resumed = False  # read through a subscription: its snapshot may overlap its first events
        self.retries = 0
        self.reconnects = 0
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

    @property
    def finished(self) -> bool:
        return self._finished

    def __repr__(self) -> str:
        return f"<A2ATaskStream {self._client.name} task={self.fold.task_id!r} seq={self.fold.seq}>"

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._finished = True
        await self._drop()

    async def start(self) -> None:
        """Open the stream and read up to the task's first event (its ids are known from then on)."""
        if self._started:
            return
        self._started = True
        loop = asyncio.get_running_loop()
        if self._config.stream_timeout is not None:
            self._deadline = loop.time() + self._config.stream_timeout
        try:
            await call_with_retries("a2a:" + ("send" if self._message else "subscribe"), self._first_event,
                                    config=self._config, sleep=self._client.sleep, on_retry=self._count_retry)
        except BaseException:
            await self.aclose()
            raise

    def _count_retry(self, _event: RetryEvent) -> None:
        self.retries += 1

    async def _first_event(self) -> None:
        await self._drop()
        first_deadline = asyncio.get_running_loop().time() + self._config.request_timeout
        if self._deadline is not None:
            first_deadline = min(first_deadline, self._deadline)
        if self._message is not None:
            self._connection = await self._within(first_deadline, self._client.send(
                self._message, self._metadata, self._deadline))
        else:
            assert self.fold.task_id is not None
            self._resumed = True
            try:
                self._connection = await self._within(first_deadline, self._client.subscribe(
                    self.fold.task_id, self._deadline))
            except AgentBadRequestError:
                # UnsupportedOperationError: the task has ended (spec 3.1.6); it is read whole instead.
                self._pending.extend(self.fold.feed(await self._client.get_task(self.fold.task_id)))
                return
        event = await self._within(first_deadline, self._connection.next())
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
        """Pick the task up again with ``SubscribeToTask``; a task that ended meanwhile with ``GetTask``."""
        await self._drop()
        loop = asyncio.get_running_loop()
        if self._deadline is not None and loop.time() >= self._deadline:
            raise AgentTimeoutError("the A2A agent's stream exceeded its time limit") from cause
        if self._broken_since is None:
            self._broken_since = loop.time()
        while True:
            delay = self._next_delay(loop.time())
            if delay is None or self.fold.task_id is None:
                raise AgentStreamError(f"the A2A agent's stream broke and {self._failed_reconnects} resumptions "
                                       f"failed ({type(cause).__name__})") from cause
            self._failed_reconnects += 1
            self.reconnects += 1
            log.warning("A2A stream broke, resuming the task", extra={
                "a2a_agent": self._client.name, "attempt": self._failed_reconnects, "delay_s": delay,
                "error_type": type(cause).__name__})
            await self._client.sleep(delay)
            try:
                self._connection = await self._within(loop.time() + self._config.read_timeout,
                                                      self._client.subscribe(self.fold.task_id, self._deadline))
                self._resumed = True
                return
            except AgentBadRequestError:
                # UnsupportedOperationError: the task ended while we were away (spec 3.1.6).
                self._pending.extend(self.fold.feed(await self._client.get_task(self.fold.task_id)))
                return
            except AgentServiceError as exc:
                if not (exc.retryable or isinstance(exc, AgentTimeoutError)) or isinstance(exc, AgentProtocolError):
                    raise
                cause = exc

    def _next_delay(self, now: float) -> float | None:
        broken_for = now - (self._broken_since if self._broken_since is not None else now)
        return reconnect_delay(self._config, self._failed_reconnects, broken_for)

    async def _within(self, deadline: float, awaitable):
        if self._deadline is not None:
            deadline = min(deadline, self._deadline)
        return await within(deadline, awaitable, "the A2A agent did not answer in time")

    async def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.aclose()
