"""``ResumableStream``: the lifetime a stream the chat follows has whatever its protocol, an Agent
Service session's events (``AgentEventStream``) as an A2A task's (``a2a_agents.stream``).

Until its first event a stream is a request: ``start`` opens it (``_open``), retried by category,
each try within the request timeout; from then on the whole stream has ``stream_timeout``. Once
events flow, a stream that broke is opened again where it broke (``_reopen``) after the configured
delays, then after the last one again while it has been broken for less than ``resume_budget``. A
pause that would end past the time limit, or a reopen that fails after it, ends the stream as a
timeout; a refusal ends it at once. The subclass reads the events and says where to resume.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Protocol, Self

from conversation_service.agent_client.config import AgentClientConfig
from conversation_service.agent_client.connection import RetryHooks
from conversation_service.agent_client.errors import (
    AgentProtocolError,
    AgentServiceError,
    AgentStreamError,
    AgentTimeoutError,
)
from conversation_service.agent_client.retry import (
    RetryEvent,
    Sleep,
    call_with_retries,
    reconnect_delay,
    within,
)


class _Connection(Protocol):
    async def aclose(self) -> None: ...


class ResumableStream:
    """A subclass provides ``_open(deadline)`` (open the stream and read up to its first event, by
    ``deadline``; ``aclose`` when there is none), ``_reopen(deadline)`` (the stream opened again where
    it broke, its answer by ``deadline``; None: nothing left to read from it), ``_resumable`` (whether
    the source knows the stream yet, so that it can be reopened) and ``_reconnecting(delay, cause)``
    (log the reconnect about to be made)."""

    _name: str  # how its errors name the stream
    _late: str  # what an open or a read that took too long says
    _connection: _Connection | None

    def __init__(self, config: AgentClientConfig, *, operation: str, sleep: Sleep,
                 hooks: RetryHooks | None = None) -> None:
        self._config = config
        self._operation = operation
        self._sleep = sleep
        self._hooks = hooks  # told of each retry and reconnect
        self.retries = 0
        self.reconnects = 0
        self._connection = None
        self._started = False
        self._finished = False
        self._deadline: float | None = None
        self._failed_reconnects = 0
        # When the stream broke and has not delivered an event since (None: it is fine).
        self._broken_since: float | None = None

    @property
    def finished(self) -> bool:
        return self._finished

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._finished = True
        await self._drop_connection()

    async def start(self) -> None:
        """Open the stream and wait for its first event (retrying by category until then)."""
        if self._started:
            return
        self._started = True
        loop = asyncio.get_running_loop()
        if self._config.stream_timeout is not None:
            self._deadline = loop.time() + self._config.stream_timeout

        async def attempt() -> None:
            await self._drop_connection()
            await self._open(loop.time() + self._config.request_timeout)

        try:
            await call_with_retries(self._operation, attempt, config=self._config, sleep=self._sleep,
                                    on_retry=self._count_retry)
        except BaseException:
            await self.aclose()
            raise

    def _count_retry(self, event: RetryEvent) -> None:
        self.retries += 1
        if self._hooks is not None and self._hooks.on_retry is not None:
            self._hooks.on_retry(event)

    async def _reconnect(self, cause: AgentServiceError) -> None:
        """Reopen the stream, backing off; gives up once the configured delays are spent and the
        stream has been broken for ``resume_budget``."""
        await self._drop_connection()
        loop = asyncio.get_running_loop()
        if self._broken_since is None:
            self._broken_since = loop.time()
        while True:
            broken_for = loop.time() - self._broken_since
            delay = reconnect_delay(self._config, self._failed_reconnects, broken_for) if self._resumable else None
            if delay is None:
                raise AgentStreamError(
                    f"{self._name} broke and {self._failed_reconnects} reconnects failed ({type(cause).__name__})"
                ) from cause
            self._failed_reconnects += 1
            if self._deadline is not None and loop.time() + delay >= self._deadline:
                raise AgentTimeoutError(f"{self._name} exceeded its time limit") from cause
            self.reconnects += 1
            self._reconnecting(delay, cause)
            if self._hooks is not None and self._hooks.on_reconnect is not None:
                self._hooks.on_reconnect(RetryEvent(f"{self._operation}:reconnect", self._failed_reconnects, delay,
                                                    cause))
            await self._sleep(delay)
            try:
                # The answer's headers within the idle timeout (a stream's requests have no read
                # timeout of httpx's, see SSEConnection) and the stream's own deadline.
                self._connection = await self._reopen(loop.time() + self._config.read_timeout)
                return
            except AgentServiceError as exc:
                # A slow or failed reconnect is one more failed attempt; a refusal (404, 401...) is final.
                expired = self._deadline is not None and loop.time() >= self._deadline
                worth_retrying = exc.retryable or isinstance(exc, AgentTimeoutError)
                if expired or isinstance(exc, AgentProtocolError) or not worth_retrying:
                    raise
                cause = exc

    async def _within(self, deadline: float, awaitable):
        """``awaitable`` by ``deadline`` and the stream's own."""
        if self._deadline is not None:
            deadline = min(deadline, self._deadline)
        return await within(deadline, awaitable, self._late)

    async def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.aclose()
