"""``AgentEventProcessor``: turns the Agent Service's events into conversation updates.

The event iterator is consumed through a bounded queue, a ``Handoff``: while the processing is
idle, an event read is handled right away in the reader's own step, so its frame is on the
WebSocket before the next event is read, with no task switch in between. While the processing
waits (a database write at a boundary, a slow hub), the reader goes on and events queue; they are
handled as one batch once it is free, consecutive answer chunks coalesced into one delta. The
reader waits only when ``agent_event_queue_size`` events are queued: back-pressure on the agent
stream rather than buffering without limit. Reading stops at the first terminal event. A failure
of the processing ends the turn with ``ProcessingFailed`` (holding the reply so far, the failure
chained) once the reader next hands an event over or the stream ends; the caller ends the reply.

Mapping (DESIGN §5):

    THOUGHT       -> agent.thinking
    TOOL_START    -> agent.tool_start      (tool status kept in the message's agent metadata)
    TOOL_END      -> agent.tool_end        (idem; metadata written at this boundary)
    ANSWER_CHUNK  -> message.delta         (no database write per chunk; ``offset`` = where its text
                                            starts in the message, so a delta sent again after a
                                            takeover replaces instead of repeating)
    WAITING       -> agent.waiting         (reason, wait_s, until: the page counts down)
    ARTIFACT      -> agent.artifact        (a file, link or data the agent made; kept in the message's
                                            agent metadata, written at this boundary)
    RUN_RESUMED   -> message.delta with no text at the offset where the run's answer stands (every
                     client cuts the text of the step that was cut there) + notice
                     ``agent_step_restarted`` about the message; the reply goes on in place
    ASK_USER      -> message.completed (the question as text, for clients that know no agent.*)
                     + agent.ask_user; a pending interaction row; session AWAITING_USER
    COMPLETE      -> message.completed + agent.complete; the final message written once
    ERROR         -> message.error + agent.error with a user-friendly text; ``CANCELLED`` (the user
                     stopped the reply) -> message.completed with status ``stopped``, the text so far

    (another type)                         no frame; counted (``conversation_agent_events_unmapped_total``)
                                            and logged once per type

A client that ignores every ``agent.*`` frame still sees a complete message for each turn. Every
end goes through ``AgentEventProcessor.end`` and so through the one writer of reply ends
(``replies.ender.ReplyEnder``), with what it means for the conversation's agent session.

Every progress frame carries the turn's ``TurnProgress`` (the agent event seq it reflects), stored
with the frame in one transaction: a replica taking the turn over (``takeover``) resumes the
agent's stream right after what the stored frames show, with the text they hold (``Resumed``).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from conversation_service.agent_client import AgentServiceError
from conversation_service.agent_sessions.repository import AgentSessionRepository
from conversation_service.conversations.repository import ConversationRepository
from conversation_service.db.models import AgentSessionStatus, Conversation, PendingInteraction
from conversation_service.interactions.repository import InteractionRepository
from conversation_service.messages.repository import MessageRepository
from conversation_service.metrics import AgentMetrics, agent_events_received
from conversation_service.realtime.frames import (
    AgentArtifact,
    AgentAskUser,
    AgentComplete,
    AgentError,
    AgentThinking,
    AgentToolEnd,
    AgentToolStart,
    AgentWaiting,
    FrameData,
    MessageDelta,
    Notice,
    TurnProgress,
)
from conversation_service.realtime.publisher import FramePublisher
from conversation_service.replies.ender import Extras, Reply, ReplyEnder
from conversation_service.replies.endings import Completed, Ending, Failed, Interrupted, Stopped
from conversation_service.replies.policy import CANCELLED, agent_error_reason, interruption_reason
from conversation_service.turns.leases import TurnLeftRunning
from shared.fastpath.deferred import DeferredWrite
from shared.fastpath.fair_share import fair_share
from shared.fastpath.handoff import Handoff
from shared.protocol import (
    ArtifactData,
    AskUserData,
    CompleteData,
    ErrorData,
    EventEnvelope,
    EventType,
    RunResumedData,
    ThoughtData,
    ToolEndData,
    ToolStartData,
    WaitingData,
    utcnow,
)
from shared.transactions import Transactions

log = logging.getLogger(__name__)

# Tool results shown on the live stream are previews; the agent has the full result.
RESULT_PREVIEW_CHARS = 500
STEP_RESTARTED = "agent_step_restarted"
STEP_RESTARTED_TEXT = "The agent restarted a step."


class TurnOutcomeKind(StrEnum):
    COMPLETE = "complete"
    ASK_USER = "ask_user"
    AGENT_ERROR = "agent_error"  # the agent answered with an ERROR event
    INTERRUPTED = "interrupted"  # the stream failed (transport, protocol, timeout) mid-turn
    STOPPED = "stopped"  # the user stopped the reply: the run ended ERROR CANCELLED
    FAILED = "failed"  # the agent answered, but the reply could not be saved whole


@dataclass
class AgentTurn:
    """One delegated message: where its events go."""

    conversation: Conversation
    session_row_id: str
    agent_session_id: str
    message_id: str  # the assistant message this turn fills
    in_reply_to: str
    metadata: dict[str, Any] = field(default_factory=dict)
    # The turn's start (the assistant message, the session's correlation), written once its first
    # frame is out; every later write of the turn waits for it. None: written already.
    record: DeferredWrite | None = None
    # The seq of the reply's message.created frame.
    since_seq: int = 0
    # Whether that frame was shown (a reply that fails before it opens has its message made by its end).
    announced: bool = True

    @property
    def reply(self) -> Reply:
        return Reply(self.conversation.id, self.message_id, self.in_reply_to, "agent", self.agent_session_id,
                     since_seq=self.since_seq, announced=self.announced)

    def progress(self, agent_seq: int) -> TurnProgress:
        # The turn is the user message's (``in_reply_to``): one turn per accepted message.
        return TurnProgress(self.in_reply_to, self.message_id, self.agent_session_id, agent_seq)

    async def recorded(self) -> None:
        if self.record is not None:
            await self.record.done()


@dataclass(frozen=True, slots=True)
class Resumed:
    """Where a taken-over turn stands: the text its stored deltas hold, after agent event ``last_seq``."""

    content: str
    last_seq: int


@dataclass
class TurnOutcome:
    kind: TurnOutcomeKind
    content: str = ""
    last_seq: int | None = None
    error: AgentServiceError | None = None
    error_code: str | None = None
    question_id: str | None = None


class ProcessingFailed(Exception):
    """Handling the turn's events failed (a write, a frame, an event it could not read), or ending it
    did: its reply has not ended. ``state`` holds the reply so far, for ``end`` to end it with the
    text the clients have seen (the cause is chained)."""

    def __init__(self, state: _TurnState) -> None:
        super().__init__("processing the agent's events failed")
        self.state = state


class AgentEventProcessor:
    def __init__(
        self,
        transactions: Transactions,
        publisher: FramePublisher,
        metrics: AgentMetrics,
        replies: ReplyEnder,
        *,
        queue_size: int,
        ask_user_timeout_s: float,
    ) -> None:
        self._tx = transactions
        self._publisher = publisher
        self._metrics = metrics
        self._replies = replies
        self._queue_size = queue_size
        self._ask_user_timeout = timedelta(seconds=ask_user_timeout_s)
        self._unmapped: set[str] = set()

    async def process(
        self, turn: AgentTurn, events: AsyncIterator[EventEnvelope], resumed: Resumed | None = None
    ) -> TurnOutcome:
        state = _TurnState(turn)
        if resumed is not None:
            state.parts.append(resumed.content)
            state.chars, state.last_seq = len(resumed.content), resumed.last_seq
        handoff: Handoff[tuple[EventEnvelope, float]] = Handoff(
            functools.partial(self._consume, state), maxsize=self._queue_size,
            name=f"agent-events:{turn.agent_session_id}",
        )
        stream_error: Exception | None = None
        try:
            try:
                async for envelope in fair_share(events):
                    await handoff.put((envelope, time.perf_counter()))
                    if envelope.is_terminal or handoff.error is not None:
                        break
            except Exception as exc:  # noqa: BLE001 - the stream failed: the user is told below
                if exc is not handoff.error:
                    stream_error = exc
            await handoff.wait_idle()
        finally:
            # Cancelled: the processing under way stops too, and has unwound (its transaction
            # rolled back) before this returns, as when it ran in this task.
            handoff.close()
            await handoff.idle.wait()
        try:
            if handoff.error is not None:
                raise handoff.error
            if state.outcome is not None:
                return state.outcome
            # The stream failed, or ended without a terminal event (the client gave up reconnecting).
            return await self._interrupted(state, stream_error)
        except TurnLeftRunning:
            raise  # ending it was tried and failed: the turn is left to a takeover, nothing more here
        except Exception as error:
            raise ProcessingFailed(state) from error

    async def _consume(self, state: _TurnState, batch: list[tuple[EventEnvelope, float]]) -> None:
        """Events in order; answer chunks that queued together become one delta. Nothing after the
        turn's outcome is handled. The frames of progress events go out with their events' arrival
        in effect (``agent_events_received``: the WebSocket side measures delivery from it)."""
        i = 0
        while i < len(batch) and state.outcome is None:
            envelope = batch[i][0]
            end = i + 1
            if envelope.type is EventType.ANSWER_CHUNK:
                while (end < len(batch) and end - i < MAX_COALESCED_CHUNKS
                       and batch[end][0].type is EventType.ANSWER_CHUNK):
                    end += 1
            events, stamps = [e for e, _ in batch[i:end]], tuple(stamp for _, stamp in batch[i:end])
            i = end
            if envelope.is_terminal:
                state.outcome = await self._finish(state, envelope)
            else:
                with agent_events_received(stamps):
                    await self._progress(state, events)
            if state.turn.record is not None:
                state.turn.record.frame_out()
            done = time.perf_counter()
            observe = self._metrics.event_processing_seconds[envelope.type].observe
            for stamp in stamps:
                observe(done - stamp)

    async def _progress(self, state: _TurnState, events: list[EventEnvelope]) -> None:
        """A thought, a tool's start or end, or answer chunks that were already waiting together:
        these go out as one ``message.delta`` (a burst of 200 tokens read in one network read costs
        one frame instead of 200, and the text is the same: clients concatenate deltas)."""
        turn = state.turn
        cid = turn.conversation.id
        envelope = events[-1]
        state.last_seq = envelope.seq
        progress = turn.progress(envelope.seq)
        match envelope.type:
            case EventType.ANSWER_CHUNK:
                text = "".join(e.data.get("text", "") for e in events)
                state.parts.append(text)
                offset, state.chars = state.chars, state.chars + len(text)
                await self._publisher.emit(cid, MessageDelta(turn.message_id, text, offset), progress=progress)
            case EventType.THOUGHT:
                data = ThoughtData.model_validate(envelope.data)
                await self._publisher.emit(cid, AgentThinking(turn.message_id, data.text, data.step), progress=progress)
            case EventType.TOOL_START:
                data = ToolStartData.model_validate(envelope.data)
                state.tools[data.call_id] = {"tool": data.tool, "args": data.args, "status": "running"}
                await self._publisher.emit(
                    cid, AgentToolStart(turn.message_id, data.call_id, data.tool, data.args), progress=progress,
                )
            case EventType.TOOL_END:
                await self._tool_end(state, ToolEndData.model_validate(envelope.data))
            case EventType.ARTIFACT:
                frame = AgentArtifact.of(turn.message_id, ArtifactData.model_validate(envelope.data))
                state.artifacts.append({k: v for k, v in frame.data().items() if k != "message_id"})
                await self._boundary(state, frame)
            case EventType.RUN_RESUMED:
                await self._resumed(state, RunResumedData.model_validate(envelope.data), progress)
            case EventType.WAITING:
                data = WaitingData.model_validate(envelope.data)
                await self._publisher.emit(cid, AgentWaiting(
                    turn.message_id, data.reason, data.wait_s, data.limit,
                    # From the event's time, so a frame read late still counts down to the right moment.
                    (envelope.ts + timedelta(seconds=data.wait_s)).isoformat(),
                ))
            case _:
                self._unmapped_event(envelope.type)

    async def _resumed(self, state: _TurnState, data: RunResumedData, progress: TurnProgress) -> None:
        """The agent's run went on after the process running it died, from the end of its last step:
        the text of the step that was cut goes (its chunks came after that step; the step is done
        again), the user is told, and the reply goes on in place, the same message."""
        turn = state.turn
        if data.answer_chars < state.chars:
            kept = "".join(state.parts)[: data.answer_chars]
            state.parts, state.chars = [kept], data.answer_chars
            await self._publisher.emit(turn.conversation.id, MessageDelta(turn.message_id, "", data.answer_chars),
                                       progress=progress)
        state.restarts += 1
        await self._publisher.emit(turn.conversation.id, Notice(STEP_RESTARTED, STEP_RESTARTED_TEXT,
                                                                message_id=turn.message_id), progress=progress)

    def _unmapped_event(self, type_: str) -> None:
        """An event type this version does not show (a newer Agent Service): counted, logged once."""
        self._metrics.unmapped_events[type_].inc()
        if type_ not in self._unmapped:
            self._unmapped.add(type_)
            log.warning("agent event type not shown in the chat", extra={"event_type": type_})

    async def _tool_end(self, state: _TurnState, data: ToolEndData) -> None:
        turn = state.turn
        entry = state.tools.setdefault(data.call_id, {"tool": data.tool})
        preview = _preview(data.result) if data.ok else None
        entry.update(status="ok" if data.ok else "error", duration_ms=round(data.duration_ms, 2),
                     error=data.error, result_preview=preview)
        frame = AgentToolEnd(turn.message_id, data.call_id, entry.get("tool"), data.ok, data.duration_ms, data.error,
                             preview)
        await self._boundary(state, frame)

    async def _boundary(self, state: _TurnState, frame: FrameData) -> None:
        """A frame that changes what the message's agent metadata holds (a tool's end, an
        artifact): out at once, then the metadata written, after the turn's start is."""
        turn = state.turn
        await self._publisher.emit(turn.conversation.id, frame, boundary=True, progress=turn.progress(state.last_seq or 0))
        await turn.recorded()
        metadata = state.metadata()

        async def write(session: AsyncSession) -> None:
            await MessageRepository(session).set_agent_metadata(turn.message_id, metadata)

        await self._tx.run(write)

    async def _finish(self, state: _TurnState, envelope: EventEnvelope) -> TurnOutcome:
        state.last_seq = envelope.seq
        match envelope.type:
            case EventType.COMPLETE:
                return await self._complete(state, CompleteData.model_validate(envelope.data))
            case EventType.ASK_USER:
                return await self._ask_user(state, AskUserData.model_validate(envelope.data))
            case _:
                return await self._agent_error(state, ErrorData.model_validate(envelope.data))

    async def _complete(self, state: _TurnState, data: CompleteData) -> TurnOutcome:
        if "".join(state.parts) != data.answer:
            # The agent guarantees chunks add up to the answer; if not, the final text wins and the
            # clients get it in message.completed.
            log.warning("answer chunks differ from COMPLETE answer", extra={"message_id": state.turn.message_id})
        ending = await self.end(state.turn, state, Completed(data.answer), complete=data)
        kind = TurnOutcomeKind.COMPLETE if isinstance(ending, Completed) else TurnOutcomeKind.FAILED
        return TurnOutcome(kind, content=data.answer, last_seq=state.last_seq)

    async def _ask_user(self, state: _TurnState, data: AskUserData) -> TurnOutcome:
        streamed = "".join(state.parts)
        content = f"{streamed}\n\n{data.question}".strip() if streamed else data.question
        ending = await self.end(state.turn, state, Completed(content), question=data)
        if not isinstance(ending, Completed):
            return TurnOutcome(TurnOutcomeKind.FAILED, content=content, last_seq=state.last_seq)
        return TurnOutcome(TurnOutcomeKind.ASK_USER, content=content, last_seq=state.last_seq,
                           question_id=data.question_id)

    async def _agent_error(self, state: _TurnState, data: ErrorData) -> TurnOutcome:
        content = "".join(state.parts)
        if data.code == CANCELLED:
            # The user stopped the reply: it ends ``stopped`` with its text so far, not as a failure.
            await self.end(state.turn, state, Stopped(content))
            return TurnOutcome(TurnOutcomeKind.STOPPED, content=content, last_seq=state.last_seq,
                               error_code=CANCELLED)
        await self.end(state.turn, state, Failed(agent_error_reason(data), content))
        return TurnOutcome(TurnOutcomeKind.AGENT_ERROR, content=content, last_seq=state.last_seq, error_code=data.code)

    async def _interrupted(self, state: _TurnState, error: BaseException | None) -> TurnOutcome:
        if error is not None and not isinstance(error, AgentServiceError):
            log.error("agent event stream failed", exc_info=error, extra={"message_id": state.turn.message_id})
        reason = interruption_reason(error)
        await self.end(state.turn, state, Interrupted(reason, "".join(state.parts)))
        return TurnOutcome(
            TurnOutcomeKind.INTERRUPTED, content="".join(state.parts), last_seq=state.last_seq,
            error=error if isinstance(error, AgentServiceError) else None, error_code=reason.code,
        )

    async def end(
        self, turn: AgentTurn, state: _TurnState | None, ending: Ending, *, complete: CompleteData | None = None,
        question: AskUserData | None = None,
    ) -> Ending:
        """End the turn's reply (``ReplyEnder``) with what the ending means for the conversation's agent
        session: an answer completes it, a question leaves it waiting for the user, a stop ends it,
        anything else fails it (the conversation's next message starts afresh)."""
        state = state or _TurnState(turn)
        return await self._replies.end(turn.reply, ending, record=turn.record,
                                       extras=functools.partial(self._extras, state, complete, question))

    def _extras(
        self, state: _TurnState, complete: CompleteData | None, question: AskUserData | None, ending: Ending,
    ) -> Extras:
        turn = state.turn
        if isinstance(ending, Completed) and question is not None:
            return self._question(state, question)
        if isinstance(ending, Completed):
            usage = complete.usage.model_dump() if complete is not None else {}
            return Extras(state.metadata(usage=usage), self._session_ends(state, AgentSessionStatus.COMPLETED,
                                                                          touch=True),
                          (AgentComplete(turn.message_id, turn.agent_session_id, usage),))
        if isinstance(ending, Stopped):
            return Extras(state.metadata(stopped=True), self._session_ends(state, AgentSessionStatus.COMPLETED))
        reason = ending.reason
        return Extras(state.metadata(error={"code": reason.code}), self._session_ends(state, AgentSessionStatus.FAILED),
                      (AgentError(turn.message_id, reason.code, reason.text, reason.retryable),))

    def _session_ends(self, state: _TurnState, status: AgentSessionStatus, *, touch: bool = False):
        """The writes that end the conversation's agent session as ``status`` (an answer keeps it
        open for the next message: COMPLETED there means "open, not running")."""
        turn, last_seq = state.turn, state.last_seq or 0

        async def write(session: AsyncSession) -> None:
            if turn.session_row_id:  # "": the turn failed before it claimed a session
                sessions = AgentSessionRepository(session)
                if touch:
                    await sessions.touch(turn.session_row_id)
                else:
                    await sessions.update_status(turn.session_row_id, status, expected=[
                        AgentSessionStatus.ACTIVE, AgentSessionStatus.AWAITING_USER])
                await sessions.advance_event_seq(turn.session_row_id, last_seq)
            await ConversationRepository(session).set_agent_status(turn.conversation.id, None)

        return write

    def _question(self, state: _TurnState, data: AskUserData) -> Extras:
        turn = state.turn
        now = utcnow()
        expires_at = min(data.expires_at, now + self._ask_user_timeout)
        ask = {"question_id": data.question_id, "question": data.question, "kind": data.kind.value,
               "expires_at": expires_at.isoformat(), "tool": data.tool, "args": data.args}
        last_seq = state.last_seq or 0

        async def write(session: AsyncSession) -> None:
            await InteractionRepository(session).add(
                PendingInteraction(
                    question_id=data.question_id, conversation_id=turn.conversation.id,
                    agent_session_row_id=turn.session_row_id, agent_session_id=turn.agent_session_id,
                    kind=data.kind.value, question=data.question, tool=data.tool, args=data.args,
                    asked_at=now, expires_at=expires_at,
                )
            )
            sessions = AgentSessionRepository(session)
            await sessions.update_status(
                turn.session_row_id, AgentSessionStatus.AWAITING_USER,
                expected=[AgentSessionStatus.ACTIVE, AgentSessionStatus.AWAITING_USER], now=now,
            )
            await sessions.set_pending_question(turn.session_row_id, data.question_id)
            await sessions.advance_event_seq(turn.session_row_id, last_seq)
            await ConversationRepository(session).set_agent_status(
                turn.conversation.id, AgentSessionStatus.AWAITING_USER.value
            )

        return Extras(state.metadata(ask_user=ask), write, (AgentAskUser(turn.message_id, **ask),))


# At most this many queued chunks become one delta frame (bounds a frame's size and the wait of
# the first chunk of a batch behind the last).
MAX_COALESCED_CHUNKS = 64


class _TurnState:
    __slots__ = ("artifacts", "chars", "last_seq", "outcome", "parts", "restarts", "tools", "turn")

    def __init__(self, turn: AgentTurn) -> None:
        self.turn = turn
        self.parts: list[str] = []
        self.chars = 0  # the length of the text so far: the next delta's offset
        self.tools: dict[str, dict[str, Any]] = {}
        # What the agent made for the user, as the page reads it (agent.artifact's data).
        self.artifacts: list[dict[str, Any]] = []
        self.last_seq: int | None = None
        self.outcome: TurnOutcome | None = None  # the first terminal event's: the turn is over
        # Steps the agent restarted after its process died (RUN_RESUMED), kept on the message.
        self.restarts = 0

    def metadata(self, **extra: Any) -> dict[str, Any]:
        made = {"artifacts": self.artifacts} if self.artifacts else {}
        if self.restarts:
            made["restarted_steps"] = self.restarts
        return {
            **self.turn.metadata,
            "path": "agent",
            "in_reply_to": self.turn.in_reply_to,
            "agent_session_id": self.turn.agent_session_id,
            "tools": self.tools,
            **made,
            "last_event_seq": self.last_seq,
            **extra,
        }


def _preview(result: Any) -> str | None:
    if result is None:
        return None
    text = result if isinstance(result, str) else str(result)
    return text if len(text) <= RESULT_PREVIEW_CHARS else text[: RESULT_PREVIEW_CHARS - 1] + "…"
