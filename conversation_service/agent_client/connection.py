"""The seam between ``AgentServiceClient`` and its event streams: ``AgentConnection`` (how to open a
stream of the Agent Service, read a session's status, pause between tries, and whom to tell of retries)
and ``SSEConnection`` (one response body read as SSE events, its reads watched by one timer).

An ``AgentEventStream`` is given an ``AgentConnection`` by the client that made it and uses nothing else
of the client; another transport (a proxy, a recorder in tests) can stand in by providing the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import httpx

from conversation_service.agent_client.config import AgentClientConfig
from conversation_service.agent_client.errors import (
    AgentProtocolError,
    AgentTimeoutError,
    translating_transport_errors,
)
from conversation_service.agent_client.retry import RetryHook, Sleep
from shared.protocol import SessionStatusResponse
from shared.sse import ServerSentEvent, SSEDecoder

__all__ = ["AgentConnection", "RetryHooks", "SSEConnection"]


class RetryHooks(Protocol):
    """Who is told of each retry of a call and each reconnect of a stream (the client's hooks)."""

    on_retry: RetryHook | None
    on_reconnect: RetryHook | None


@dataclass(frozen=True, slots=True)
class AgentConnection:
    config: AgentClientConfig
    # Send a streaming request (an execute, or a session's events); a non-200 answer raises its error.
    open_stream: Callable[[httpx.Request, float | None], Awaitable[SSEConnection]]
    # The request for a session's events after a seq (all of them when None).
    events_request: Callable[[str, int | None], httpx.Request]
    session_status: Callable[[str], Awaitable[SessionStatusResponse]]
    sleep: Sleep
    hooks: RetryHooks


class SSEConnection:
    """One HTTP response body read as SSE events, with the size of a single event capped.

    Its reads are watched by one timer: a read that waits ``idle_s`` for bytes (the Agent Service
    sends a heartbeat every 15 s, so only a dead connection is that quiet), or that is still
    waiting at the stream's ``deadline``, ends in :class:`AgentTimeoutError`. httpx would open a
    timeout scope around every network read, and a deadline around each event read would add one
    more: two timer handles made and cancelled per event. Here a read only notes when it began,
    and the one timer, when it fires before the limit of the read under way, re-arms itself for it.
    The stream's requests are therefore sent without httpx's read timeout (see ``AgentServiceClient._open_stream``).
    """

    def __init__(
        self, response: httpx.Response, max_event_bytes: int, *, idle_s: float, deadline: float | None = None
    ) -> None:
        self.response = response
        # Chunks as they arrive (no re-chunking, which would hold events back until a chunk fills);
        # streams are requested without compression, so a chunk is at most one network read.
        self._chunks = response.aiter_bytes()
        self._decoder = SSEDecoder()
        self._pending: list[ServerSentEvent] = []
        self._max_event_bytes = max_event_bytes
        self._partial_bytes = 0
        self.cut_mid_event = False
        self._loop = asyncio.get_running_loop()
        self._idle_s = idle_s
        self._deadline = deadline
        self._timer: asyncio.TimerHandle | None = None
        self._reader: asyncio.Task | None = None  # the task waiting in a read, if any
        self._read_since = 0.0
        self._expired = False

    async def next_event(self) -> ServerSentEvent | None:
        """The next complete event, or None when the body ended."""
        while not self._pending:
            try:
                chunk = await self._read()
            except StopAsyncIteration:
                # An event cut off before its blank line is never delivered half-read.
                self.cut_mid_event = self._decoder.has_partial_event
                return None
            try:
                events = self._decoder.feed(chunk)
            except UnicodeDecodeError as exc:
                raise AgentProtocolError("the event stream is not valid UTF-8") from exc
            if not self._decoder.has_partial_event:
                self._partial_bytes = 0
            elif events:
                # The unfinished event started inside this chunk, so it is at most this long.
                self._partial_bytes = len(chunk)
            else:
                self._partial_bytes += len(chunk)
            for event in events:
                if len(event.data) > self._max_event_bytes:
                    raise AgentProtocolError(f"an event exceeds {self._max_event_bytes} bytes")
            if self._partial_bytes > self._max_event_bytes:
                raise AgentProtocolError(f"an event exceeds {self._max_event_bytes} bytes")
            self._pending.extend(events)
        return self._pending.pop(0)

    async def _read(self) -> bytes:
        task = asyncio.current_task()
        assert task is not None
        cancelling = task.cancelling()
        self._reader = task
        self._read_since = self._loop.time()
        if self._timer is None:
            self._timer = self._loop.call_at(self._limit(), self._check)
        try:
            with translating_transport_errors():
                return await anext(self._chunks)
        except asyncio.CancelledError:
            if not self._expired:
                raise
            self._expired = False
            if task.uncancel() > cancelling:
                raise  # cancelled by someone else as well: that cancellation wins
            raise AgentTimeoutError(
                "the Agent Service sent nothing within the idle timeout"
                if self._deadline is None or self._loop.time() < self._deadline
                else "the event stream exceeded its time limit"
            ) from None
        finally:
            self._reader = None

    def _limit(self) -> float:
        """When the read under way times out."""
        limit = self._read_since + self._idle_s
        return limit if self._deadline is None else min(limit, self._deadline)

    def _check(self) -> None:
        self._timer = None
        reader = self._reader
        if reader is None:
            return  # between reads (the consumer is busy): the next read arms the timer again
        limit = self._limit()
        if self._loop.time() >= limit:
            self._expired = True
            reader.cancel()
        else:
            self._timer = self._loop.call_at(limit, self._check)

    async def aclose(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        await self.response.aclose()
