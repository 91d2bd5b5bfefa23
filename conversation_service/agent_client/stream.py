"""The event stream of one Agent Service session, resumed across broken connections.

A stream has two phases. Until its first event arrives it is a request like any other: a failure
is retried by category (the execute carries the same ``Idempotency-Key`` on every try, so a retry
joins the run instead of starting a second one). Once events flow, a broken connection is
resumed with ``GET /api/v1/agent/sessions/{id}/events`` and ``Last-Event-ID``; events the
consumer already has (``seq <= last_seq``) are dropped, so the consumer sees every event at most
once, in order. A hole in the sequence is accepted and counted (``seqs_skipped``): after the Agent
Service crashed mid-run, the events it had shown but not yet written are gone, and the RUN_RESUMED
that continues the run (or the ERROR that ends it) comes after every seq the run had reserved (see
"Crash safety: seqs" in docs/architecture.md). A RUN_RESUMED is passed on like any event: the
consumer drops the run's answer text after its ``checkpoint_seq`` (``shared.protocol.RunResumedData``).

Every event is untrusted input: its size is capped while it is being read, and it is validated
(:func:`decode_event`) before anyone sees it. A stream reaches the Agent Service only through the
``AgentConnection`` its client gave it (``connection``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import httpx
import orjson
import pydantic

from conversation_service.agent_client.connection import AgentConnection, SSEConnection
from conversation_service.agent_client.errors import (
    AgentProtocolError,
    AgentServiceError,
    AgentStreamError,
    AgentTimeoutError,
)
from conversation_service.agent_client.resumable import ResumableStream
from shared.protocol import (
    EVENT_DATA_MODELS,
    TERMINAL_SESSION_STATUSES,
    EventEnvelope,
    EventType,
    SessionStatus,
)
from shared.sse import ServerSentEvent
from shared.storable import NUL_IN_JSON, storable

logger = logging.getLogger(__name__)

_KNOWN_EVENT_TYPES = frozenset(t.value for t in EventType)


def decode_event(sse: ServerSentEvent) -> EventEnvelope:
    """One agent event, validated: its envelope, its SSE id, and its payload against its type.

    One pydantic validation per answer chunk: the chunks are nearly every event of a run (one per
    token), and their payload (``AnswerChunkData``: ``text``, a string) is checked here directly
    instead of by a second validation of the envelope's ``data``. The rarer types go through their
    payload model as well. Raises ``ValueError`` (``pydantic.ValidationError`` is one).
    """
    envelope = EventEnvelope.model_validate_json(sse.data)
    if NUL_IN_JSON in sse.data:
        envelope.data = storable(envelope.data)  # rare: a NUL from a tool or the model (shared.storable)
    if sse.id is not None and sse.id != str(envelope.seq):
        raise ValueError(f"SSE id {sse.id!r} does not match envelope seq {envelope.seq}")
    if envelope.type is EventType.ANSWER_CHUNK:
        if type(envelope.data.get("text")) is not str:
            raise ValueError("an ANSWER_CHUNK without its text")
    else:
        EVENT_DATA_MODELS[envelope.type].model_validate(envelope.data)
    return envelope


class AgentEventStream(ResumableStream):
    """Async iterator of :class:`EventEnvelope`.

    An execute's stream ends with its run's terminal event (COMPLETE, ERROR or ASK_USER); a
    ``stream_events`` stream, which may span several runs of the session, ends when the service
    closes it and the session has nothing more (not running, every event read).

    Use it as ``async with stream: async for event in stream``; entering opens the stream and waits
    for its first event, so ``session_id`` is known right after. Iterating without ``async with``
    works too and closes the connection when the stream ends or fails.

    Its lifetime (start, time limit, reconnects, close) is :class:`ResumableStream`'s. Observable
    for metrics: ``retries`` (tries repeated before the stream started), ``reconnects`` (resumptions
    after it broke), ``duplicates_dropped``, ``unknown_events_skipped``, ``seqs_skipped`` (numbers of
    the holes a crashed run left).
    """

    _name = "the event stream"
    _late = "the Agent Service did not send events in time"
    _connection: SSEConnection | None

    def __init__(
        self,
        connection: AgentConnection,
        *,
        operation: str,
        open_request: Callable[[], httpx.Request] | None = None,
        session_id: str | None = None,
        last_seq: int | None = None,
        idempotency_key: str | None = None,
        end_on_terminal: bool = True,
    ) -> None:
        super().__init__(connection.config, operation=operation, sleep=connection.sleep, hooks=connection.hooks)
        self._agent = connection
        self._open_request = open_request
        self.session_id = session_id
        self.run_id: str | None = None
        self.last_seq = last_seq
        self.idempotency_key = idempotency_key
        # An execute streams one run, so its terminal event ends the stream. A session's event log
        # can hold several runs; that stream ends when the service closes it with nothing left.
        self._end_on_terminal = end_on_terminal
        self.duplicates_dropped = 0
        self.unknown_events_skipped = 0
        self.seqs_skipped = 0
        self.events_received = 0
        self.terminal_event: EventEnvelope | None = None
        self._first: EventEnvelope | None = None

    def __repr__(self) -> str:
        return (
            f"<AgentEventStream {self._operation} session_id={self.session_id!r} last_seq={self.last_seq}"
            f" retries={self.retries} reconnects={self.reconnects}>"
        )

    # -- opening ----------------------------------------------------------------------------

    async def _open(self, deadline: float) -> None:
        if self._open_request is not None:
            request = self._open_request()
        else:
            assert self.session_id is not None
            request = self._agent.events_request(self.session_id, self.last_seq)
        self._connection = await self._within(deadline, self._agent.open_stream(request, self._deadline))
        while True:
            sse = await self._within(deadline, self._connection.next_event())
            if sse is None:
                if await self._caught_up():
                    # Nothing left to stream: the session had already finished and we had everything.
                    await self.aclose()
                    return
                raise AgentStreamError("the event stream ended before its first event", retryable=True)
            self._first = self._accept(sse)
            if self._first is not None:
                return

    # -- iteration --------------------------------------------------------------------------

    def __aiter__(self) -> AgentEventStream:
        return self

    async def __anext__(self) -> EventEnvelope:
        if self._finished:
            raise StopAsyncIteration
        if not self._started:
            await self.start()
            if self._finished:
                raise StopAsyncIteration
        try:
            if self._first is not None:
                envelope, self._first = self._first, None
            else:
                maybe = await self._next_envelope()
                if maybe is None:
                    await self.aclose()
                    raise StopAsyncIteration
                envelope = maybe
        except StopAsyncIteration:
            raise
        except BaseException:
            await self.aclose()
            raise
        if envelope.is_terminal:
            self.terminal_event = envelope
            if self._end_on_terminal:
                await self.aclose()
        return envelope

    async def _next_envelope(self) -> EventEnvelope | None:
        while True:
            assert self._connection is not None
            try:
                sse = await self._connection.next_event()  # bounded by the connection's timer
            except AgentTimeoutError as exc:
                if self._deadline is not None and asyncio.get_running_loop().time() >= self._deadline:
                    raise
                # An idle timeout: no heartbeat for longer than two intervals, the connection is dead.
                await self._reconnect(exc)
                continue
            except AgentProtocolError:
                raise
            except AgentServiceError as exc:
                if not exc.retryable:
                    raise
                await self._reconnect(exc)
                continue
            if sse is None:
                if not self._connection.cut_mid_event and await self._caught_up():
                    return None
                await self._reconnect(AgentStreamError("the event stream ended before a terminal event"))
                continue
            envelope = self._accept(sse)
            if envelope is not None:
                self._failed_reconnects, self._broken_since = 0, None
                return envelope

    # -- resuming ---------------------------------------------------------------------------

    @property
    def _resumable(self) -> bool:
        return self.session_id is not None

    async def _reopen(self, deadline: float) -> SSEConnection:
        """Resume with ``Last-Event-ID``."""
        request = self._agent.events_request(self.session_id, self.last_seq)
        return await self._within(deadline, self._agent.open_stream(request, self._deadline))

    def _reconnecting(self, delay: float, cause: AgentServiceError) -> None:
        logger.warning(
            "agent event stream broke, reconnecting",
            extra={
                "agent_session_id": self.session_id,
                "last_seq": self.last_seq,
                "attempt": self._failed_reconnects,
                "delay_s": delay,
                "error_type": type(cause).__name__,
            },
        )

    async def _caught_up(self) -> bool:
        """After a clean end without a terminal event: is there really nothing more to read?"""
        if self.session_id is None:
            return False
        try:
            status = await self._agent.session_status(self.session_id)
        except AgentServiceError as exc:
            if exc.retryable:
                return False
            raise
        settled = status.status in TERMINAL_SESSION_STATUSES or status.status is SessionStatus.AWAITING_USER
        return settled and status.last_seq <= (self.last_seq or 0)

    # -- validation -------------------------------------------------------------------------

    def _accept(self, sse: ServerSentEvent) -> EventEnvelope | None:
        """Validate one event and place it in the sequence; None for a duplicate or unknown type."""
        if sse.event not in _KNOWN_EVENT_TYPES and sse.event != "message":
            # A type added to the contract after this client was built: keep the sequence, skip it.
            seq = self._unknown_event_seq(sse)
            if self._place(seq, session_id=None):
                self.unknown_events_skipped += 1
            return None
        try:
            envelope = decode_event(sse)
        except (pydantic.ValidationError, ValueError) as exc:
            raise AgentProtocolError(f"invalid event from the Agent Service: {type(exc).__name__}") from exc
        if sse.event != "message" and sse.event != envelope.type.value:
            raise AgentProtocolError(f"SSE event {sse.event!r} does not match envelope type {envelope.type.value}")
        if not self._place(envelope.seq, session_id=envelope.session_id):
            return None
        self.run_id = envelope.run_id
        self.events_received += 1
        return envelope

    def _unknown_event_seq(self, sse: ServerSentEvent) -> int:
        try:
            raw = orjson.loads(sse.data)
        except orjson.JSONDecodeError as exc:
            raise AgentProtocolError("invalid event from the Agent Service: not JSON") from exc
        seq = raw.get("seq") if isinstance(raw, dict) else None
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
            raise AgentProtocolError("invalid event from the Agent Service: no valid seq")
        return seq

    def _place(self, seq: int, *, session_id: str | None) -> bool:
        if session_id is not None:
            if self.session_id is None:
                self.session_id = session_id
            elif session_id != self.session_id:
                raise AgentProtocolError("an event of another session arrived on this stream")
        if self.last_seq is not None:
            if seq <= self.last_seq:
                self.duplicates_dropped += 1
                return False
            if seq != self.last_seq + 1:
                # A hole a crashed run left (shown, never written): nothing to wait for or ask again.
                self.seqs_skipped += seq - self.last_seq - 1
                logger.info(
                    "agent event stream skips a hole in the sequence",
                    extra={"agent_session_id": self.session_id, "last_seq": self.last_seq, "seq": seq},
                )
        self.last_seq = seq
        return True
