"""``TurnFailures``: a delegated turn that a fault of this service's own broke off, and dead letters.

Shared by the turn's own run (``service.AgentDelegation``) and the takeover of a turn whose replica
died (``takeover.TurnTakeover``): a fault of ours (a bug, a write that failed) ends a turn the same
way on either path, through the one writer of reply ends, and leaves it running for the lease sweep
when even that fails.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from conversation_service.agent_delegation.processor import AgentEventProcessor, AgentTurn, ProcessingFailed
from conversation_service.agent_delegation.repository import DeadLetterRepository
from conversation_service.agent_delegation.schemas import TurnAttempt, TurnRequest
from conversation_service.db.models import Conversation, Message, new_id
from conversation_service.metrics import AgentMetrics
from conversation_service.replies.endings import TURN_FAILED, Ending, Failed
from conversation_service.turns.leases import TurnLeftRunning
from shared.protocol import ExecuteRequest
from shared.transactions import Transactions


class TurnFailures:
    def __init__(self, *, transactions: Transactions, processor: AgentEventProcessor, metrics: AgentMetrics) -> None:
        self._tx = transactions
        self._processor = processor
        self._metrics = metrics

    async def end_broken(
        self, conversation: Conversation, user_message: Message, request: TurnRequest, attempt: TurnAttempt,
        error: Exception,
    ) -> None:
        """End a turn that a fault of ours broke off the way a broken stream ends one: the reply
        ``error`` with its text so far, ``message.error`` and ``agent.error`` (retryable), the agent
        session failed and the conversation free for its next message; then a dead letter.

        Nothing when the reply had ended (only what followed it failed: the user has their answer).
        ``TurnLeftRunning`` (from ``ReplyEnder``) when ending it fails too: the caller's
        ``TurnLeases.hold`` then leaves the turn running for the lease sweep."""
        if attempt.ended:
            return
        self._metrics.turns["failed"].inc()
        # A failure in the processing of the agent's events: the reply so far, the clients' text.
        so_far, cause = (error.state, error.__cause__ or error) if isinstance(error, ProcessingFailed) else (None, error)
        turn = attempt.reply or self.unopened_reply(conversation, user_message, attempt.row_id,
                                                    attempt.agent_session_id)
        content = "".join(so_far.parts) if so_far is not None else ""
        await self.end(turn, so_far, Failed(TURN_FAILED, content), attempt)
        if attempt.execute is not None:
            payload = dead_letter_payload(attempt.execute)
        else:  # broken off before its request was built (or a takeover, which has none): what a replay needs
            payload = {"message": request.text,
                       "answer_question_id": request.answer.question_id if request.answer else None}
        attempts = attempt.stream.retries + 1 if attempt.stream is not None else 0
        await self.dead_letter(conversation.id, user_message.id, attempt.agent_session_id, TURN_FAILED.code,
                               f"{type(cause).__name__}: {cause}", payload, attempts)

    async def end(self, turn: AgentTurn, so_far, ending: Ending, attempt: TurnAttempt) -> Ending:
        """End the turn's reply, and mark the attempt ended once the user has its end;
        ``TurnLeftRunning`` when that fails."""
        try:
            ended = await self._processor.end(turn, so_far, ending)
        except TurnLeftRunning:
            raise
        except Exception as failure:
            raise TurnLeftRunning(f"could not end the failed agent turn of message {turn.in_reply_to}") from failure
        attempt.ended = True
        return ended

    @staticmethod
    def unopened_reply(
        conversation: Conversation, user_message: Message, row_id: str, agent_session_id: str | None
    ) -> AgentTurn:
        """The reply of a turn that failed before its reply opened: the failure shows where the answer
        would have been (the page offers Retry on it); its message is created by its end."""
        # ``row_id`` "" (no session claimed yet): nothing to mark failed.
        return AgentTurn(conversation=conversation, session_row_id=row_id, agent_session_id=agent_session_id or "",
                         message_id=new_id(), in_reply_to=user_message.id, announced=False)

    async def dead_letter(
        self, conversation_id: str, message_id: str | None, agent_session_id: str | None, code: str,
        detail: str, payload: dict[str, Any] | None, attempts: int,
    ) -> None:
        async def write(session: AsyncSession) -> None:
            await DeadLetterRepository(session).add(
                conversation_id=conversation_id, message_id=message_id, agent_session_id=agent_session_id,
                error_code=code, error_detail=detail, payload=payload, attempts=attempts,
            )

        await self._tx.run(write)
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
