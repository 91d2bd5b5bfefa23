"""``TurnFailures``: how a delegated turn that failed ends: its reply marked failed, its dead letter.

Shared by the turn's own run (``service.AgentDelegation``) and the takeover of a turn whose replica
died (``takeover.TurnTakeover``): a fault of this service's own (a bug, a failed write) ends a turn
the same way on either path, and leaves it running for the lease sweep when even that fails.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import async_sessionmaker

from conversation_service.agent_delegation.processor import AgentEventProcessor, AgentTurn, ProcessingFailed
from conversation_service.agent_delegation.repository import DeadLetterRepository
from conversation_service.agent_delegation.schemas import TurnAttempt, TurnRequest
from conversation_service.db.models import Conversation, Message, MessageRole, MessageStatus
from conversation_service.db.repository import unit_of_work
from conversation_service.messages.schemas import message_frame_data
from conversation_service.metrics import AgentMetrics
from conversation_service.realtime.frames import FrameType
from conversation_service.realtime.publisher import FramePublisher
from conversation_service.turns.leases import TurnLeftRunning
from shared.protocol import ExecuteRequest

# A turn broken off by a fault of this service's own (a bug, a failed write): what the user reads.
TURN_FAILED = "agent_failed"
TURN_FAILED_TEXT = "The agent could not answer this message. Please try again."


class TurnFailures:
    def __init__(
        self, *, sessionmaker: async_sessionmaker, processor: AgentEventProcessor, publisher: FramePublisher,
        metrics: AgentMetrics,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._processor = processor
        self._publisher = publisher
        self._metrics = metrics

    async def end_broken(
        self, conversation: Conversation, user_message: Message, request: TurnRequest, attempt: TurnAttempt,
        error: Exception,
    ) -> None:
        """End a turn that a fault of ours broke off the way a broken stream ends one: the reply
        ``error`` with its text so far, ``message.error`` and ``agent.error`` (retryable), the agent
        session failed and the conversation free for its next message; then a dead letter.

        Nothing when the reply had ended (only what followed it failed: the user has their answer).
        ``TurnLeftRunning`` when ending it fails too: the caller's ``TurnLeases.hold`` then leaves
        the turn running for the lease sweep instead of marking it done."""
        if attempt.ended:
            return
        self._metrics.turns["failed"].inc()
        # A failure in the processing of the agent's events: the reply so far, the clients' text.
        so_far, cause = (error.state, error.__cause__ or error) if isinstance(error, ProcessingFailed) else (None, error)
        try:
            turn = attempt.reply or await self.open_failed_reply(conversation, user_message, attempt.row_id,
                                                                 attempt.agent_session_id)
            await self._processor.fail(turn, so_far, code=TURN_FAILED, text=TURN_FAILED_TEXT, retryable=True)
        except Exception as failure:
            # Ending it failed too (the database is down, most likely): not marked done, the turn's
            # lease runs out and the sweep's takeover ends the reply.
            raise TurnLeftRunning(f"could not end the failed agent turn of message {user_message.id}") from failure
        attempt.ended = True
        if attempt.execute is not None:
            payload = dead_letter_payload(attempt.execute)
        else:  # broken off before its request was built (or a takeover, which has none): what a replay needs
            payload = {"message": request.text,
                       "answer_question_id": request.answer.question_id if request.answer else None}
        attempts = attempt.stream.retries + 1 if attempt.stream is not None else 0
        await self.dead_letter(conversation.id, user_message.id, attempt.agent_session_id, TURN_FAILED,
                               f"{type(cause).__name__}: {cause}", payload, attempts)

    async def open_failed_reply(
        self, conversation: Conversation, user_message: Message, row_id: str, agent_session_id: str | None
    ) -> AgentTurn:
        """The assistant message of a turn that fails before its reply opened, for ``fail`` to end:
        the failure shows where the answer would have been (the page offers Retry on it)."""
        async with unit_of_work(self._sessionmaker) as session:
            message = Message(
                conversation_id=conversation.id, role=MessageRole.ASSISTANT.value, content="",
                status=MessageStatus.STREAMING.value, agent_session_id=agent_session_id,
                agent_metadata={"path": "agent", "in_reply_to": user_message.id},
            )
            session.add(message)
            await session.flush()
        await self._publisher.emit(conversation.id, FrameType.MESSAGE_CREATED, message_frame_data(message))
        # ``row_id`` "" (no session claimed yet): ``fail`` has no session to mark failed.
        return AgentTurn(conversation=conversation, session_row_id=row_id, agent_session_id=agent_session_id or "",
                         message_id=message.id, in_reply_to=user_message.id)

    async def dead_letter(
        self, conversation_id: str, message_id: str | None, agent_session_id: str | None, code: str,
        detail: str, payload: dict[str, Any] | None, attempts: int,
    ) -> None:
        async with unit_of_work(self._sessionmaker) as session:
            await DeadLetterRepository(session).add(
                conversation_id=conversation_id, message_id=message_id, agent_session_id=agent_session_id,
                error_code=code, error_detail=detail, payload=payload, attempts=attempts,
            )
        self._metrics.dead_letters[code].inc()


def dead_letter_payload(execute: ExecuteRequest) -> dict[str, Any]:
    """What is needed to analyse or replay the request: ids, sizes, not the history's text."""
    return {
        "session_id": execute.session_id,
        "profile_name": execute.profile_name,
        "message": execute.message,
        "answer_question_id": execute.answer.question_id if execute.answer else None,
        "chat_history_messages": len(execute.chat_history),
        "user_context": execute.user_context.model_dump(mode="json"),
        "metadata": execute.metadata,
    }
