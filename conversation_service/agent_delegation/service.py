"""Agent delegation: one delegated message (a "turn") from routing decision to finished reply.

A turn: claim the conversation's open agent session (``conversation_agent_sessions``), window the
history, call ``execute`` through the ``AgentServiceClient`` (retries by category, one idempotency
key per user message so a retry or a restart never starts a second run), and hand the event
stream to the ``AgentEventProcessor``. Turns of one conversation run one after another (the agent
session runs one run at a time); different conversations run concurrently.

Failures end visibly, never in silence:
- the Agent Service is unreachable / 503 / 500 after the retries, or the breaker is open: the
  direct LLM answers, with the notice "Advanced features temporarily unavailable, using standard
  chat", and the request goes to ``dead_letters``;
- 408, 4xx, a broken stream or an agent ERROR: the user sees an error with a readable reason,
  and (except for an agent ERROR, which is the agent's own answer) a dead letter is written;
- a fault of this service's own (a bug, a failed write): the same, code ``agent_failed``; when
  even that cannot be written, the turn is left running for the lease sweep to end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from conversation_service.agent_client import (
    AgentConnectError,
    AgentServerError,
    AgentServiceClient,
    AgentServiceError,
    AgentTimeoutError,
    AgentUnavailableError,
)
from conversation_service.agent_delegation.failures import TurnFailures, dead_letter_payload
from conversation_service.agent_delegation.processor import (
    AgentEventProcessor,
    AgentTurn,
    TurnOutcome,
    TurnOutcomeKind,
)
from conversation_service.agent_delegation.schemas import TurnAttempt, TurnRequest
from conversation_service.agent_delegation.settings import DelegationSettings
from conversation_service.agent_delegation.turns import ConversationTurns, PreparedTurn, TurnRegistry
from conversation_service.agent_sessions.errors import AgentSessionConflict
from conversation_service.agent_sessions.repository import AgentSessionRepository
from conversation_service.agent_sessions.service import AgentSessionService
from conversation_service.db.models import (
    AgentSessionStatus,
    Conversation,
    ConversationAgentSession,
    Message,
    MessageRole,
    MessageStatus,
    new_id,
    utcnow,
)
from conversation_service.db.repository import unit_of_work
from conversation_service.direct_llm.replier import DirectLLMReplier
from conversation_service.history.extractor import HistoryExtractor
from conversation_service.history.schemas import HistoryRecord
from conversation_service.messages.repository import MessageRepository
from conversation_service.messages.schemas import message_frame_data
from conversation_service.metrics import AgentMetrics
from conversation_service.realtime.frames import FrameType, TurnProgress
from conversation_service.realtime.publisher import FramePublisher
from conversation_service.resilience.breaker import CircuitBreaker, CircuitOpenError
from conversation_service.routing.schemas import FALLBACK_NOTICE
from conversation_service.tasks import TaskSupervisor
from conversation_service.turns.leases import TurnLeases
from shared.logging import conversation_id_var, session_id_var
from shared.protocol import Answer, ExecuteRequest, UserContext

log = logging.getLogger(__name__)

# Errors that say the Agent Service itself is unhealthy: they count against the breaker and the
# message falls back to the direct LLM. Anything else is about this request.
UNHEALTHY_ERRORS = (AgentUnavailableError, AgentServerError, AgentConnectError, AgentTimeoutError)
# How many times a session claim is retried when another replica's claim is not visible yet.
CLAIM_ATTEMPTS = 3


# The conversation's open agent session and the history rows before the message.
Claim = tuple[ConversationAgentSession, list[Message]]


class AgentDelegation:
    def __init__(
        self,
        *,
        sessionmaker: async_sessionmaker,
        client: AgentServiceClient,
        breaker: CircuitBreaker,
        history: HistoryExtractor,
        processor: AgentEventProcessor,
        replier: DirectLLMReplier,
        publisher: FramePublisher,
        metrics: AgentMetrics,
        settings: DelegationSettings,
        tasks: TaskSupervisor,
        leases: TurnLeases,
        failures: TurnFailures,
    ) -> None:
        self._leases = leases
        self._failures = failures
        self._sessionmaker = sessionmaker
        self._client = client
        self._breaker = breaker
        self._history = history
        self._processor = processor
        self._replier = replier
        self._publisher = publisher
        self._metrics = metrics
        self._settings = settings
        self._tasks = tasks
        self._turns = TurnRegistry()

    def prepare(self, conversation_id: str) -> PreparedTurn:
        """Call before the routing read of a message that may go to the agent (see ``turns``)."""
        turns = self._turns.get(conversation_id)
        return PreparedTurn(turns, turns.registered, turns.idle)

    async def read_ahead(
        self, prepared: PreparedTurn, session: AsyncSession, row: ConversationAgentSession, user_message: Message
    ) -> None:
        """In the routing transaction, which found ``row`` open and ACTIVE: read the history the
        turn would otherwise read in a claim transaction of its own (only while no turn is in flight)."""
        if prepared.idle:
            prepared.claim = row, await self._read_history(session, user_message)

    def start(
        self, conversation: Conversation, user_message: Message, request: TurnRequest,
        prepared: PreparedTurn | None = None,
    ) -> None:
        """Start the turn in the background; it counts as started before its task runs, so a claim
        read ahead of it can tell."""
        turns = self._turns.get(conversation.id)
        turns.begin()
        claim = prepared.claim if prepared is not None and prepared.turns is turns and prepared.still_valid() else None
        try:
            # The turn is the user message's: done when this task ends, left to a takeover if it dies.
            self._tasks.spawn(self._leases.hold(user_message.id, self._run(conversation, user_message, request, turns,
                                                                           claim)),
                              name=f"agent-turn:{user_message.id}")
        except BaseException:
            turns.end()
            raise

    def resume(self, conversation: Conversation, message: Message, answer: Answer, *, reason: str) -> None:
        """``interactions.service.AgentResumer``: the turn that hands the user's answer to the agent."""
        self.start(conversation, message, TurnRequest(text=answer.text, answer=answer, route_reason=reason))

    async def run(self, conversation: Conversation, user_message: Message, request: TurnRequest) -> str:
        """Run a turn in the caller's task, after the conversation's turns under way, and say how it
        ended (``turns_total``'s outcome: complete, ask_user, agent_error, interrupted, fallback,
        failed). A dead letter's replay: the same idempotency key as the message's first turn."""
        turns = self._turns.get(conversation.id)
        turns.begin()
        return await self._run(conversation, user_message, request, turns, None)

    async def _read_history(self, session: AsyncSession, user_message: Message) -> list[Message]:
        """The finished messages before ``user_message`` that a turn's history is windowed from."""
        return await MessageRepository(session).complete_before(user_message, self._history.settings.max_input_messages)

    async def _run(
        self, conversation: Conversation, user_message: Message, request: TurnRequest, turns: ConversationTurns,
        claim: Claim | None,
    ) -> str:
        """One delegated message; returns how it ended once the reply has ended."""
        token = conversation_id_var.set(conversation.id)
        attempt = TurnAttempt()
        try:
            async with turns.lock:
                return await self._run_turn(conversation, user_message, request, claim, attempt)
        except Exception as error:
            # Last line of defence: a fault of our own. The user must learn that this message got no
            # answer, and the turn must end, or the reply streams forever and the session stays busy.
            log.exception("agent turn failed", extra={"message_id": user_message.id})
            await self._failures.end_broken(conversation, user_message, request, attempt, error)
            return "failed"
        finally:
            turns.end()
            conversation_id_var.reset(token)

    async def _run_turn(
        self, conversation: Conversation, user_message: Message, request: TurnRequest, claim: Claim | None,
        attempt: TurnAttempt,
    ) -> str:
        started = time.perf_counter()
        claimed = claim if claim is not None else await self._claim_session(conversation.id, user_message)
        if claimed is None:
            await self._publisher.emit(
                conversation.id, FrameType.NOTICE,
                {"code": "agent_session_conflict",
                 "text": "Another agent session is starting for this conversation. Please resend your message."},
                boundary=True,
            )
            self._metrics.turns["failed"].inc()
            attempt.ended = True
            return "failed"
        row, history_rows = claimed
        row_id, agent_session_id, profile_name = row.id, row.agent_session_id, row.profile_name
        attempt.row_id, attempt.agent_session_id = row_id, agent_session_id
        chat_history, history_stats = await self._chat_history(conversation.id, history_rows)
        execute = ExecuteRequest(
            session_id=agent_session_id,
            profile_name=profile_name,
            message=request.text if request.answer is None else "",
            chat_history=chat_history,
            user_context=UserContext(user_id=conversation.owner_id, org_id=conversation.org_id),
            answer=request.answer,
            metadata={"conversation_id": conversation.id, "message_id": user_message.id},
        )
        attempt.execute = execute
        try:
            is_probe = self._breaker.acquire()
        except CircuitOpenError:
            await self._fall_back(conversation, user_message, row_id, attempt, created_now=agent_session_id is None,
                                  code="circuit_open", detail="circuit breaker open", payload=None, attempts=0)
            return "fallback"

        # One key per user message (and regeneration of its answer): a retry, or the same message
        # delegated again after a restart, joins the run the first try started instead of a second.
        stream = attempt.stream = self._client.execute_agent(execute, idempotency_key=run_key(user_message))
        try:
            await stream.start()
        except AgentServiceError as error:
            return await self._start_failed(conversation, user_message, attempt, error)
        except BaseException:
            self._breaker.release()
            await stream.aclose()
            raise
        self._metrics.first_chunk_seconds.observe(time.perf_counter() - started)
        attempt.agent_session_id = stream.session_id or agent_session_id
        session_id_token = session_id_var.set(stream.session_id)
        turn: AgentTurn | None = None
        try:
            # The run's events start after this one: where a takeover resumes if no later frame is stored.
            before_first = max((stream.last_seq or 1) - 1, 0)
            turn = attempt.reply = await self._open_turn(
                conversation, user_message, row_id, agent_session_id, stream.session_id or "", request,
                history_stats, before_first,
            )
            outcome = await self._processor.process(turn, _iterate(stream))
            attempt.ended = True
        except BaseException:
            self._breaker.release()
            raise
        finally:
            await stream.aclose()
            session_id_var.reset(session_id_token)
            if turn is not None:
                turn.start_opening()  # a turn that failed before its first frame still records its start
                if turn.opened is not None:
                    await _settle_opening(turn.opened)
        self._count_retries(stream)
        await self._settle(conversation, user_message, turn, outcome, execute, stream.retries + 1, is_probe)
        return outcome.kind.value

    async def _claim_session(self, conversation_id: str, user_message: Message) -> Claim | None:
        """The conversation's open agent session (created if none) and the history rows before
        ``user_message``, in one transaction: one round trip to the database, not two."""
        for attempt in range(CLAIM_ATTEMPTS):
            try:
                async with unit_of_work(self._sessionmaker) as session:
                    row, _created = await AgentSessionService(session).get_or_create_open(
                        conversation_id, profile_name=self._settings.agent_profile_name
                    )
                    return row, await self._read_history(session, user_message)
            except AgentSessionConflict:
                # Another replica's claim is not committed yet; its commit is a few ms away.
                await asyncio.sleep(0.05 * (attempt + 1))
        return None

    async def _chat_history(self, conversation_id: str, rows: list[Message]):
        records = [HistoryRecord.from_message(m) for m in rows]
        result = await self._history.extract(conversation_id, records)
        return result.messages, result.stats.as_dict()

    async def _open_turn(
        self,
        conversation: Conversation,
        user_message: Message,
        row_id: str,
        known_agent_session_id: str | None,
        agent_session_id: str,
        request: TurnRequest,
        history_stats: dict[str, Any],
        before_first: int,
    ) -> AgentTurn:
        metadata = {"route_reason": request.route_reason, "history": history_stats}
        # The assistant message is announced at once and written in the background, started once
        # the first event's frame is out: the first answer chunk waits neither for this transaction
        # nor for its CPU time on the loop. Nothing per event touches the database; the processor
        # waits for the write (``AgentTurn.ready``) before its first write (a tool's end, the final
        # message), so the row always exists by then.
        message = Message(
            id=new_id(), conversation_id=conversation.id, role=MessageRole.ASSISTANT.value, content="",
            status=MessageStatus.STREAMING.value, client_message_id=None, created_at=utcnow(),
            agent_session_id=agent_session_id,
            agent_metadata={"path": "agent", "in_reply_to": user_message.id, **metadata},
        )
        await self._publisher.emit(
            conversation.id, FrameType.MESSAGE_CREATED, message_frame_data(message),
            progress=TurnProgress(user_message.id, message.id, agent_session_id, before_first),
        )
        return AgentTurn(
            conversation=conversation, session_row_id=row_id, agent_session_id=agent_session_id,
            message_id=message.id, in_reply_to=user_message.id, metadata=metadata,
            opening=lambda: self._record_turn(row_id, known_agent_session_id, agent_session_id, message),
        )

    async def _record_turn(
        self, row_id: str, known_agent_session_id: str | None, agent_session_id: str, message: Message
    ) -> None:
        """The turn's start in one transaction: correlation, status, and the assistant message."""
        async with unit_of_work(self._sessionmaker) as session:
            sessions = AgentSessionRepository(session)
            if known_agent_session_id is None:
                await sessions.set_agent_session_id(row_id, agent_session_id)
            # One UPDATE for both: a row that is not open any more has no pending question already.
            await sessions.update_status(
                row_id, AgentSessionStatus.ACTIVE,
                expected=[AgentSessionStatus.ACTIVE, AgentSessionStatus.AWAITING_USER], clear_pending_question=True,
            )
            session.add(message)

    async def _start_failed(
        self, conversation: Conversation, user_message: Message, attempt: TurnAttempt, error: AgentServiceError
    ) -> str:
        """The end of a turn whose execute failed: the direct LLM's answer, or the error shown."""
        stream, execute = attempt.stream, attempt.execute
        row_id, agent_session_id = attempt.row_id, attempt.agent_session_id
        assert stream is not None and execute is not None
        self._count_retries(stream)
        attempts = stream.retries + 1
        if isinstance(error, UNHEALTHY_ERRORS):
            self._breaker.record_failure()
            await self._fall_back(
                conversation, user_message, row_id, attempt, created_now=agent_session_id is None,
                code=type(error).__name__, detail=str(error), payload=dead_letter_payload(execute),
                attempts=attempts,
            )
            return "fallback"
        # The service answered: it is up, but it refused this request (400, 408, 409, 413...).
        self._breaker.release()
        log.warning("agent refused the request", extra={"error_type": type(error).__name__,
                                                        "message_id": user_message.id})
        await self._failures.dead_letter(conversation.id, user_message.id, agent_session_id, type(error).__name__,
                                         str(error), dead_letter_payload(execute), attempts)
        turn = attempt.reply = await self._failures.open_failed_reply(conversation, user_message, row_id,
                                                                      agent_session_id)
        await self._processor.fail(turn, None, code=type(error).__name__, text=error.user_message,
                                   retryable=error.retryable)
        attempt.ended = True
        self._metrics.turns["failed"].inc()
        return "failed"

    async def _settle(
        self,
        conversation: Conversation,
        user_message: Message,
        turn: AgentTurn,
        outcome: TurnOutcome,
        execute: ExecuteRequest,
        attempts: int,
        is_probe: bool,
    ) -> None:
        self._metrics.turns[outcome.kind.value].inc()
        if outcome.kind is TurnOutcomeKind.ASK_USER:
            self._metrics.questions["asked"].inc()
        if outcome.kind is TurnOutcomeKind.INTERRUPTED:
            self._breaker.record_failure()
            await self._failures.dead_letter(conversation.id, user_message.id, turn.agent_session_id,
                                             outcome.error_code or "stream_interrupted",
                                             str(outcome.error or "stream ended before a terminal event"),
                                             dead_letter_payload(execute), attempts)
        else:
            # The Agent Service did its job (an agent ERROR is an answer too).
            self._breaker.record_success()

    async def _fall_back(
        self,
        conversation: Conversation,
        user_message: Message,
        row_id: str,
        attempt: TurnAttempt,
        *,
        created_now: bool,
        code: str,
        detail: str,
        payload: dict[str, Any] | None,
        attempts: int,
    ) -> None:
        if payload is not None:
            await self._failures.dead_letter(conversation.id, user_message.id, None, code, detail, payload, attempts)
        if created_now:
            # A session that never reached the agent must not keep the conversation routed to it.
            async with unit_of_work(self._sessionmaker) as session:
                await AgentSessionRepository(session).update_status(
                    row_id, AgentSessionStatus.FAILED, expected=[AgentSessionStatus.ACTIVE]
                )
        self._metrics.turns["fallback"].inc()
        log.warning("agent unavailable, falling back to the direct LLM",
                    extra={"error_code": code, "message_id": user_message.id})
        # The direct reply is the turn's from here: its replier ends it, whatever happens to it.
        attempt.ended = True
        await self._replier.reply(
            conversation, user_message, notice=("agent_unavailable", FALLBACK_NOTICE),
            agent_metadata={"fallback_from": "agent", "fallback_reason": code},
        )

    def _count_retries(self, stream) -> None:
        """Add a finished stream's retry and reconnect counts to the metrics (call once per stream)."""
        if stream.retries:
            self._metrics.retries["retry"].inc(stream.retries)
        if stream.reconnects:
            self._metrics.retries["reconnect"].inc(stream.reconnects)


def run_key(user_message: Message) -> str:
    """The Idempotency-Key of the agent run answering ``user_message``: ``msg-<id>``, and for the
    n-th regenerated answer ``msg-<id>-<n>`` (a new run, where the first key would join the old one)."""
    attempt = (user_message.agent_metadata or {}).get("attempt", 0)
    return f"msg-{user_message.id}-{attempt}" if attempt else f"msg-{user_message.id}"


async def _settle_opening(opened: asyncio.Task) -> None:
    """Wait for a turn's start write if the processor did not; its failure is logged once."""
    try:
        await asyncio.shield(opened)
    except asyncio.CancelledError:
        if not opened.done():
            raise
    except Exception:
        log.exception("could not record the agent turn's start")


async def _iterate(stream) -> Any:
    async for event in stream:
        yield event
