"""Agent delegation: one delegated message (a "turn") from routing decision to finished reply.

A turn: claim the conversation's open agent session (``conversation_agent_sessions``), window the
history, call ``execute`` through the ``AgentServiceClient`` (retries by category, one idempotency
key per user message so a retry or a restart never starts a second run), and hand the event
stream to the ``AgentEventProcessor``. Turns of one conversation run one after another (the agent
session runs one run at a time); different conversations run concurrently.

Failures end visibly, never in silence; ``replies.policy`` says how each ends (the direct LLM's
answer with a notice, or the reply ``Failed`` with a dead letter, or the agent's own error), and
``replies.ender.ReplyEnder`` ends every one of them. A fault of this service's own (a bug, a failed
write) ends the reply ``agent_failed``; when even that cannot be written, the turn is left running
for the lease sweep to end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from conversation_service.agent_client import AgentEventStream, AgentServiceError
from conversation_service.agent_delegation.failures import TurnFailures, dead_letter_payload
from conversation_service.agent_delegation.processor import (
    AgentEventProcessor,
    AgentTurn,
    TurnOutcome,
    TurnOutcomeKind,
)
from conversation_service.agent_delegation.schemas import TurnAttempt, TurnRequest
from conversation_service.agent_delegation.targets import AgentTargets
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
from conversation_service.direct_llm.replier import DirectLLMReplier
from conversation_service.history.extractor import HistoryExtractor
from conversation_service.history.schemas import HistoryRecord
from conversation_service.messages.repository import MessageRepository
from conversation_service.messages.schemas import message_frame_data
from conversation_service.metrics import AgentMetrics
from conversation_service.realtime.frames import MessageCreated, Notice, TurnProgress
from conversation_service.realtime.publisher import FramePublisher
from conversation_service.replies.endings import Failed
from conversation_service.replies.policy import Action, action_for, failure_reason, says_agent_unhealthy
from conversation_service.settings.delegation import DelegationSettings
from conversation_service.settings.routing import FALLBACK_NOTICE
from conversation_service.tasks import TaskSupervisor
from conversation_service.turns.leases import TurnLeases, TurnLeftRunning
from shared.breaker import CircuitOpenError
from shared.fastpath.deferred import DeferredWrite
from shared.logging import conversation_id_var, session_id_var
from shared.protocol import Answer, ExecuteRequest, UserContext
from shared.tracing import NO_TRACING, Tracing, TracingOff
from shared.transactions import Transactions

log = logging.getLogger(__name__)

# How many times a session claim is retried when another replica's claim is not visible yet.
CLAIM_ATTEMPTS = 3
CLAIM_CONFLICT_TEXT = "Another agent session is starting for this conversation. Please resend your message."


# The conversation's open agent session and the history rows before the message.
Claim = tuple[ConversationAgentSession, list[Message]]


class AgentDelegation:
    def __init__(
        self,
        *,
        transactions: Transactions,
        targets: AgentTargets,
        history: HistoryExtractor,
        processor: AgentEventProcessor,
        replier: DirectLLMReplier,
        publisher: FramePublisher,
        metrics: AgentMetrics,
        settings: DelegationSettings,
        tasks: TaskSupervisor,
        leases: TurnLeases,
        failures: TurnFailures,
        tracing: Tracing | TracingOff = NO_TRACING,
    ) -> None:
        self._tracing = tracing
        self._leases = leases
        self._failures = failures
        self._tx = transactions
        self._targets = targets
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
        if claim is not None and request.agent not in (None, claim[0].agent_name):
            claim = None  # the user named another agent: the claim switches the conversation to it
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
        """The finished messages before ``user_message`` that a turn's history is windowed from: the
        newest the window can use (``HistoryExtractor.rows_to_read``), all that are allowed when
        too many of those were skipped."""
        messages, history = MessageRepository(session), self._history
        limit = history.rows_to_read()
        rows = await messages.complete_before(user_message, limit)
        if len(rows) == limit and not history.read_enough([HistoryRecord.from_message(m) for m in rows]):
            rows = await messages.complete_before(user_message, history.settings.max_input_messages)
        return rows

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
        except TurnLeftRunning:
            raise  # its end could not be written: left to the lease sweep
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
        claimed = claim if claim is not None else await self._claim_session(conversation, user_message, request)
        if claimed is None:
            return await self._claim_conflict(conversation, attempt)
        execute = await self._request(conversation, user_message, request, claimed, attempt)
        breaker = self._targets.breaker(attempt.agent_name)
        try:
            is_probe = breaker.acquire()
        except CircuitOpenError as error:
            return await self._recover(conversation, user_message, attempt, error)
        # One key per user message (and regeneration of its answer): a retry, or the same message
        # delegated again after a restart, joins the run the first try started instead of a second.
        try:
            stream = attempt.stream = self._targets.execute(claimed[0], execute, idempotency_key=run_key(user_message))
            await stream.start()
        except AgentServiceError as error:
            return await self._recover(conversation, user_message, attempt, error)
        except BaseException:
            breaker.release()
            if attempt.stream is not None:
                await attempt.stream.aclose()
            raise
        self._metrics.first_chunk_seconds.observe(time.perf_counter() - started)
        outcome = await self._follow(conversation, user_message, request, attempt, stream)
        self._count_retries(stream)
        await self._settle(conversation, user_message, attempt, outcome, is_probe)
        return outcome.kind.value

    async def _claim_conflict(self, conversation: Conversation, attempt: TurnAttempt) -> str:
        """Another replica's claim of the conversation's session is not visible yet: the user resends."""
        await self._publisher.emit(conversation.id, Notice("agent_session_conflict", CLAIM_CONFLICT_TEXT), boundary=True)
        self._metrics.turns["failed"].inc()
        attempt.ended = True
        return "failed"

    async def _request(
        self, conversation: Conversation, user_message: Message, request: TurnRequest, claimed: Claim,
        attempt: TurnAttempt,
    ) -> ExecuteRequest:
        row, history_rows = claimed
        attempt.row_id, attempt.agent_session_id = row.id, row.agent_session_id
        attempt.profile_name, attempt.agent_name = row.profile_name, row.agent_name
        chat_history, attempt.history_stats = await self._chat_history(conversation.id, history_rows)
        attempt.execute = ExecuteRequest(
            session_id=row.agent_session_id,
            profile_name=row.profile_name,
            message=request.text if request.answer is None else "",
            chat_history=chat_history,
            user_context=UserContext(user_id=conversation.owner_id, org_id=conversation.org_id),
            answer=request.answer,
            metadata={"conversation_id": conversation.id, "message_id": user_message.id,
                      # An A2A agent's name: a dead letter's replay goes to the same agent.
                      **({"agent": row.agent_name} if row.agent_name else {})},
        )
        return attempt.execute

    async def _follow(
        self, conversation: Conversation, user_message: Message, request: TurnRequest, attempt: TurnAttempt,
        stream: AgentEventStream,
    ) -> TurnOutcome:
        """The run's events, from its first to its end, through the processor."""
        attempt.agent_session_id, known = stream.session_id or attempt.agent_session_id, attempt.agent_session_id
        session_id_token = session_id_var.set(stream.session_id)
        turn: AgentTurn | None = None
        try:
            # The run's events start after this one: where a takeover resumes if no later frame is stored.
            before_first = max((stream.last_seq or 1) - 1, 0)
            turn = attempt.reply = await self._open_turn(conversation, user_message, attempt, known, request,
                                                         before_first)
            # One span for the whole stream (its event count, its first event's time), none per event.
            outcome = await self._processor.process(turn, self._tracing.counted(_iterate(stream), "receive agent events"))
            attempt.ended = True
            return outcome
        except BaseException:
            self._targets.breaker(attempt.agent_name).release()
            raise
        finally:
            await stream.aclose()
            session_id_var.reset(session_id_token)
            if turn is not None and turn.record is not None:
                turn.record.frame_out()  # a turn that failed before its first frame still records its start
                await turn.record.settle()

    async def _claim_session(self, conversation: Conversation, user_message: Message,
                             request: TurnRequest) -> Claim | None:
        """The conversation's open agent session (created if none, with the agent ``AgentTargets``
        chooses; another one when the user named another) and the history rows before
        ``user_message``, in one transaction: one round trip to the database, not two."""

        async def claim(session: AsyncSession) -> Claim:
            row, _created = await AgentSessionService(session).get_or_create_open(
                conversation.id, profile_name=self._settings.agent_profile_name,
                agent_name=self._targets.choose(None, conversation.org_id), switch_to=request.agent,
            )
            return row, await self._read_history(session, user_message)

        for attempt in range(CLAIM_ATTEMPTS):
            try:
                return await self._tx.run(claim)
            except AgentSessionConflict:
                # Another replica's claim is not committed yet; its commit is a few ms away.
                await asyncio.sleep(0.05 * (attempt + 1))
        return None

    async def _chat_history(self, conversation_id: str, rows: list[Message]):
        records = [HistoryRecord.from_message(m) for m in rows]
        result = await self._history.extract(conversation_id, records)
        return result.messages, result.stats.as_dict()

    async def _open_turn(
        self, conversation: Conversation, user_message: Message, attempt: TurnAttempt,
        known_agent_session_id: str | None, request: TurnRequest, before_first: int,
    ) -> AgentTurn:
        agent_session_id = attempt.agent_session_id or ""
        metadata = {"route_reason": request.route_reason, "history": attempt.history_stats}
        if attempt.agent_name is not None:
            metadata["agent"] = attempt.agent_name  # which agent answers: the page shows it
        # The assistant message is announced at once; its row is written once the first event's
        # frame is out (``DeferredWrite``), and the turn's later writes wait for it.
        message = Message(
            id=new_id(), conversation_id=conversation.id, role=MessageRole.ASSISTANT.value, content="",
            status=MessageStatus.STREAMING.value, client_message_id=None, created_at=utcnow(),
            agent_session_id=agent_session_id,
            agent_metadata={"path": "agent", "in_reply_to": user_message.id, **metadata},
        )
        created = await self._publisher.emit(
            conversation.id, MessageCreated(message_frame_data(message)),
            progress=TurnProgress(user_message.id, message.id, agent_session_id, before_first),
        )
        task_id = attempt.stream.run_id if attempt.agent_name is not None and attempt.stream is not None else None
        record = DeferredWrite(
            lambda: self._record_turn(attempt.row_id, known_agent_session_id, agent_session_id, message, task_id),
            name=f"agent-turn-record:{message.id}",
        )
        return AgentTurn(
            conversation=conversation, session_row_id=attempt.row_id, agent_session_id=agent_session_id,
            message_id=message.id, in_reply_to=user_message.id, metadata=metadata, record=record,
            since_seq=created.seq,
        )

    async def _record_turn(
        self, row_id: str, known_agent_session_id: str | None, agent_session_id: str, message: Message,
        a2a_task_id: str | None,
    ) -> None:
        """The turn's start in one transaction: correlation (an A2A agent's task too), status, and the
        assistant message."""

        async def record(session: AsyncSession) -> None:
            sessions = AgentSessionRepository(session)
            if known_agent_session_id is None:
                await sessions.set_agent_session_id(row_id, agent_session_id)
            if a2a_task_id:
                await sessions.set_a2a_task_id(row_id, a2a_task_id)
            # One UPDATE for both: a row that is not open any more has no pending question already.
            await sessions.update_status(
                row_id, AgentSessionStatus.ACTIVE,
                expected=[AgentSessionStatus.ACTIVE, AgentSessionStatus.AWAITING_USER], clear_pending_question=True,
            )
            await MessageRepository(session).open_reply(_copy(message))

        await self._tx.run(record)

    async def _recover(
        self, conversation: Conversation, user_message: Message, attempt: TurnAttempt, error: Exception,
    ) -> str:
        """The end of a turn whose execute failed (or was not sent: the breaker is open), as
        ``replies.policy`` says: the direct LLM's answer, or the error shown; a dead letter either way
        when a request was sent."""
        attempts = 0
        if attempt.stream is not None:
            self._count_retries(attempt.stream)
            attempts = attempt.stream.retries + 1
        breaker = self._targets.breaker(attempt.agent_name)
        if says_agent_unhealthy(error):
            breaker.record_failure()
        elif not isinstance(error, CircuitOpenError):
            breaker.release()  # the service answered: it is up, it refused this request
        sent = attempt.stream is not None and attempt.execute is not None
        if sent:
            await self._failures.dead_letter(
                conversation.id, user_message.id, None if action_for(error) is Action.FALL_BACK
                else attempt.agent_session_id, type(error).__name__, str(error),
                dead_letter_payload(attempt.execute), attempts,
            )
        if action_for(error) is Action.FALL_BACK:
            await self._fall_back(conversation, user_message, attempt, code=type(error).__name__
                                  if sent else "circuit_open")
            return "fallback"
        log.warning("agent refused the request", extra={"error_type": type(error).__name__,
                                                        "message_id": user_message.id})
        turn = self._failures.unopened_reply(conversation, user_message, attempt.row_id, attempt.agent_session_id)
        attempt.reply = turn
        await self._failures.end(turn, None, Failed(failure_reason(error)), attempt)
        self._metrics.turns["failed"].inc()
        return "failed"

    async def _settle(
        self, conversation: Conversation, user_message: Message, attempt: TurnAttempt, outcome: TurnOutcome,
        is_probe: bool,
    ) -> None:
        self._metrics.turns[outcome.kind.value].inc()
        if outcome.kind is TurnOutcomeKind.ASK_USER:
            self._metrics.questions["asked"].inc()
        if outcome.kind is TurnOutcomeKind.INTERRUPTED:
            assert attempt.stream is not None and attempt.execute is not None and attempt.reply is not None
            self._targets.breaker(attempt.agent_name).record_failure()
            await self._failures.dead_letter(conversation.id, user_message.id, attempt.reply.agent_session_id,
                                             outcome.error_code or "stream_interrupted",
                                             str(outcome.error or "stream ended before a terminal event"),
                                             dead_letter_payload(attempt.execute), attempt.stream.retries + 1)
        else:
            # The Agent Service did its job (an agent ERROR is an answer too).
            self._targets.breaker(attempt.agent_name).record_success()

    async def _fall_back(
        self, conversation: Conversation, user_message: Message, attempt: TurnAttempt, *, code: str,
    ) -> None:
        if attempt.agent_session_id is None:
            # A session that never reached the agent must not keep the conversation routed to it.
            async def fail_session(session: AsyncSession) -> None:
                await AgentSessionRepository(session).update_status(
                    attempt.row_id, AgentSessionStatus.FAILED, expected=[AgentSessionStatus.ACTIVE]
                )

            await self._tx.run(fail_session)
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


def _copy(message: Message) -> Message:
    """A new instance of the row to add: a transaction run again must not add one already flushed."""
    return Message(id=message.id, conversation_id=message.conversation_id, role=message.role,
                   content=message.content, status=message.status, client_message_id=None,
                   created_at=message.created_at, agent_session_id=message.agent_session_id,
                   agent_metadata=message.agent_metadata)


def run_key(user_message: Message) -> str:
    """The Idempotency-Key of the agent run answering ``user_message``: ``msg-<id>``, and for the
    n-th regenerated answer ``msg-<id>-<n>`` (a new run, where the first key would join the old one)."""
    attempt = (user_message.agent_metadata or {}).get("attempt", 0)
    return f"msg-{user_message.id}-{attempt}" if attempt else f"msg-{user_message.id}"


async def _iterate(stream) -> Any:
    async for event in stream:
        yield event
