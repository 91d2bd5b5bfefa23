"""``TurnTakeover``: a turn whose replica died is ended by another (or by the same one restarted).

Every replica sweeps every ``turn_sweep_interval_s`` for running turns whose lease ran out and
claims them (``FOR UPDATE SKIP LOCKED``: one replica each). What happens to a claimed turn depends
on what its stored frames had shown when the owner died:

- nothing of a reply (the owner died before its reply's first frame was stored): the message is
  dispatched again. An agent turn sends the same ``Idempotency-Key`` (``msg-<id>``), so it follows
  the run the dead replica started (from that run's first event) instead of starting a second;
- an agent reply: the Agent Service's run outlived us; its stream is resumed after the agent event
  seq stored with the last frame (``Last-Event-ID``) through the same ``AgentEventProcessor``,
  which starts from the text the stored deltas hold. The stored message ends equal to the deltas
  in the frame log, each chunk once; deltas carry their ``offset`` in the message, so a chunk a
  live client had seen in a frame that died unstored replaces rather than repeats;
- a direct-LLM reply: it cannot be resumed (the provider's stream died with the replica), and is
  not generated again: a second sampling would differ from the text the user has read, and
  replacing that text silently is worse than saying it broke. The message ends ``error`` with the
  text shown so far and a ``message.error`` (``reply_interrupted``, retryable) the page offers a
  retry for;
- a direct reply the user had asked to stop: it ends ``stopped`` with the text shown so far (an
  agent reply's stop went to the Agent Service, whose run ends CANCELLED: resuming it ends it so);
- a reply that had ended but whose turn was not marked done: its end frame is sent if the frame
  log lacks it, and the turn is done.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession

from conversation_service.agent_delegation.dispatcher import AgentReplyDispatcher
from conversation_service.agent_delegation.failures import TurnFailures
from conversation_service.agent_delegation.processor import AgentEventProcessor, AgentTurn, Resumed
from conversation_service.agent_delegation.schemas import TurnAttempt
from conversation_service.agent_delegation.service import AgentDelegation
from conversation_service.agent_delegation.targets import AgentTargets
from conversation_service.agent_sessions.repository import AgentSessionRepository
from conversation_service.conversations.repository import ConversationRepository
from conversation_service.db.models import (
    Conversation,
    Message,
    MessageRole,
    MessageStatus,
    Turn,
    TurnKind,
    new_id,
    utcnow,
)
from conversation_service.messages.repository import MessageRepository
from conversation_service.metrics import AgentMetrics
from conversation_service.realtime.frames import Frame, FrameType, with_delta
from conversation_service.realtime.repository import FrameRepository
from conversation_service.replies.ender import Reply, ReplyEnder
from conversation_service.replies.endings import REPLY_INTERRUPTED, Completed, Ending, Interrupted, Stopped
from conversation_service.tasks import TaskSupervisor
from conversation_service.turns.leases import TurnLeases
from shared.fastpath.deferred import DeferredWrite
from shared.transactions import Transactions

T = TypeVar("T")
log = logging.getLogger(__name__)

# The route reason of a turn dispatched, or resumed, by a takeover.
TAKEOVER = "takeover"
INTERRUPTED_TEXT = REPLY_INTERRUPTED.text
# A turn whose takeovers keep failing (the process taking it over dies too) ends with an error.
MAX_TAKEOVERS = 3
_TERMINAL_FRAMES = (FrameType.MESSAGE_COMPLETED, FrameType.MESSAGE_ERROR)


class TurnTakeover:
    def __init__(
        self, *, transactions: Transactions, leases: TurnLeases, dispatcher: AgentReplyDispatcher,
        delegation: AgentDelegation, processor: AgentEventProcessor, targets: AgentTargets,
        replies: ReplyEnder, tasks: TaskSupervisor, metrics: AgentMetrics, failures: TurnFailures,
        batch: int = 50,
    ) -> None:
        self._tx = transactions
        self._failures = failures
        self._leases = leases
        self._dispatcher = dispatcher
        self._delegation = delegation
        self._processor = processor
        self._targets = targets
        self._replies = replies
        self._tasks = tasks
        self._metrics = metrics
        self._batch = batch

    async def sweep(self) -> int:
        """Claim the turns whose lease ran out and end each in a task of its own; how many."""
        claimed = await self._leases.claim_expired(self._batch)
        for turn in claimed:
            log.warning("taking over a turn whose owner stopped renewing it",
                        extra={"turn_id": turn.id, "takeovers": turn.takeovers})
            self._tasks.spawn(self._take_over(turn), name=f"turn-takeover:{turn.id}")
        return len(claimed)

    def _hold(self, turn: Turn, reply: Coroutine[Any, Any, T]) -> Coroutine[Any, Any, T]:
        return self._leases.hold(turn.id, reply, linked=turn.traceparent, takeover=True)

    async def _take_over(self, turn: Turn) -> None:
        # A trace of its own (the sweep is a background loop), linked to the trace of the message.
        with self._leases.observer.takeover(turn.id, turn.traceparent, turn.takeovers):
            await self._take_over_traced(turn)

    async def _take_over_traced(self, turn: Turn) -> None:
        async def read(session: AsyncSession):
            conversation = await ConversationRepository(session).get(turn.conversation_id)
            user_message = await MessageRepository(session).get(turn.id)
            reply = await MessageRepository(session).get(turn.assistant_message_id) if turn.assistant_message_id else None
            frames = (await FrameRepository(session).message_frames(turn.conversation_id, turn.assistant_message_id)
                      if turn.assistant_message_id else [])
            return conversation, user_message, reply, frames

        try:
            conversation, user_message, reply, frames = await self._tx.run(read)
            if conversation is None or user_message is None:
                await self._leases.finish(turn.id)  # deleted meanwhile: nobody to answer
                return
            await self._end(turn, conversation, user_message, reply, frames)
        except Exception:
            # Left running (not done): its lease runs out again and the next sweep tries once more.
            self._leases.give_up(turn.id)
            log.exception("turn takeover failed; the next sweep tries again", extra={"turn_id": turn.id})

    async def _end(
        self, turn: Turn, conversation: Conversation, user_message: Message, reply: Message | None, frames: list[Frame]
    ) -> None:
        ended = next((f for f in frames if f.type in _TERMINAL_FRAMES), None)
        if reply is not None and reply.status != MessageStatus.STREAMING.value or ended is not None:
            await self._hold(turn, self._settle(turn, conversation, reply, ended))
            self._metrics.takeovers["settled"].inc()
        elif turn.stop_requested_at is not None and turn.kind == TurnKind.DIRECT.value:
            # The user stopped it before its owner died: it ends as they asked, not as a failure.
            await self._hold(turn, self._replies.end(self._reply_of(turn, conversation),
                                                                Stopped(_shown(frames).text)))
            self._metrics.takeovers["settled"].inc()
        elif turn.takeovers > MAX_TAKEOVERS or turn.kind == TurnKind.DIRECT.value or not _shown(frames).whole:
            # A direct reply cannot be resumed, and is not generated again: a second sampling would
            # differ from the text the user has read. A reply whose stored deltas have a hole (frames
            # given up while the database was away) is not continued over it either.
            await self._hold(turn, self._replies.end(self._reply_of(turn, conversation),
                                                                Interrupted(REPLY_INTERRUPTED, _shown(frames).text)))
            self._metrics.takeovers["failed"].inc()
        elif turn.assistant_message_id is None or turn.agent_session_id is None:
            self._metrics.takeovers["restarted"].inc()
            await self._restart(conversation, user_message)  # its task holds the turn from here
        else:
            outcome = await self._hold(turn, self._resume(turn, conversation, user_message, frames))
            self._metrics.takeovers[outcome].inc()

    @staticmethod
    def _reply_of(turn: Turn, conversation: Conversation) -> Reply:
        """The turn's reply: its message, or a new one when the owner died before it had one."""
        return Reply(conversation.id, turn.assistant_message_id or new_id(), turn.id, turn.kind or "unknown",
                     turn.agent_session_id, announced=turn.assistant_message_id is not None)

    async def _restart(self, conversation: Conversation, user_message: Message) -> None:
        request = self._dispatcher.request_of(user_message, reason=TAKEOVER)
        if request.answer is not None:
            self._delegation.resume(conversation, user_message, request.answer, reason=TAKEOVER)
        else:
            await self._dispatcher.dispatch(conversation, user_message)

    async def _resume(self, turn: Turn, conversation: Conversation, user_message: Message, frames: list[Frame]) -> str:
        """Continue the agent's stream after the last stored frame; ``resumed``, or ``failed``: a
        fault of ours on the way ends the reply failed as on the turn's own path
        (``TurnFailures.end_broken``), or leaves the turn running for the next sweep when even that
        fails (``TurnLeftRunning``)."""
        assert turn.assistant_message_id is not None and turn.agent_session_id is not None
        content = _shown(frames).text
        agent_turn = AgentTurn(
            # The session row is found below; until then (a failed read) ``end`` has none to mark failed.
            conversation=conversation, session_row_id="",
            agent_session_id=turn.agent_session_id, message_id=turn.assistant_message_id, in_reply_to=user_message.id,
            metadata={"taken_over": turn.takeovers},
            record=DeferredWrite(lambda: self._ensure_message(conversation.id, turn, user_message, content),
                                 name=f"turn-takeover-record:{turn.id}"),
        )
        attempt = TurnAttempt(agent_session_id=turn.agent_session_id, reply=agent_turn)
        try:
            async def session_row(session: AsyncSession):
                return await AgentSessionRepository(session).get_by_agent_session_id(turn.agent_session_id or "")

            row = await self._tx.run(session_row)
            agent_turn.session_row_id = attempt.row_id = row.id if row is not None else ""
            attempt.agent_name = row.agent_name if row is not None else None
            if attempt.agent_name is not None:
                agent_turn.metadata["agent"] = attempt.agent_name
            # The Agent Service's log from the stored seq on; an A2A agent's task subscribed to again,
            # sending on what the stored deltas lack.
            stream = attempt.stream = self._targets.resume(row, turn.agent_session_id, last_seq=turn.last_agent_seq,
                                                           delivered=content)
            try:
                await self._processor.process(agent_turn, _iterate(stream), Resumed(content, turn.last_agent_seq))
                attempt.ended = True
            finally:
                await stream.aclose()
        except Exception as error:
            log.exception("taken-over agent turn failed", extra={"turn_id": turn.id})
            await self._failures.end_broken(conversation, user_message, self._dispatcher.request_of(
                user_message, reason=TAKEOVER), attempt, error)
            return "failed"
        return "resumed"

    async def _ensure_message(self, conversation_id: str, turn: Turn, user_message: Message, content: str) -> None:
        """The reply's row, when its owner died before writing it (its start is written lazily)."""

        async def write(session: AsyncSession) -> None:
            await MessageRepository(session).open_reply(Message(
                id=turn.assistant_message_id, conversation_id=conversation_id, role=MessageRole.ASSISTANT.value,
                content=content, status=MessageStatus.STREAMING.value, created_at=utcnow(),
                agent_session_id=turn.agent_session_id, agent_metadata={"path": "agent", "in_reply_to": user_message.id},
            ))

        await self._tx.run(write)

    async def _settle(self, turn: Turn, conversation: Conversation, reply: Message | None, ended: Frame | None) -> None:
        """The reply had ended; only its end frame may be missing from the log."""
        if ended is not None or reply is None:
            return
        ending: Ending
        if reply.status == MessageStatus.COMPLETE.value:
            ending = Completed(reply.content)
        elif reply.status == MessageStatus.STOPPED.value:
            ending = Stopped(reply.content)
        else:
            ending = Interrupted(REPLY_INTERRUPTED, reply.content)
        await self._replies.show_end(self._reply_of(turn, conversation), ending)


class _Shown:
    """The text a reply's stored deltas show, and whether it is whole (each delta starts where the
    text before it ends: none was lost in between)."""

    __slots__ = ("text", "whole")

    def __init__(self, text: str, whole: bool) -> None:
        self.text, self.whole = text, whole


def _shown(frames: list[Frame]) -> _Shown:
    text, whole = "", True
    for frame in frames:
        if frame.type != FrameType.MESSAGE_DELTA:
            continue
        offset = frame.data.get("offset")
        # Past the end: a delta before it was lost. Inside: it replaces (a chunk sent again after a
        # takeover, or the cut of a step the agent restarted).
        whole = whole and not (isinstance(offset, int) and offset > len(text))
        text = with_delta(text, frame.data.get("text", ""), offset)
    return _Shown(text, whole)


async def _iterate(stream):
    async for event in stream:
        yield event
