"""Answering the agent's pending question (``POST /conversations/{id}/agent-answer``): validate the
answer, store it as the user's message, resume the agent with it."""

from __future__ import annotations

from typing import Protocol

from sqlalchemy.ext.asyncio import async_sessionmaker

from conversation_service.auth.tokens import AuthenticatedUser
from conversation_service.conversations.repository import ConversationRepository
from conversation_service.conversations.service import get_owned_conversation
from conversation_service.db.models import (
    Conversation,
    InteractionKind,
    InteractionStatus,
    Message,
    MessageRole,
)
from conversation_service.errors import Conflict, Gone, PayloadTooLarge
from conversation_service.interactions.expiry import QuestionExpiry
from conversation_service.interactions.repository import InteractionRepository
from conversation_service.interactions.schemas import AgentAnswerAccepted, AgentAnswerIn
from conversation_service.messages.repository import MessageRepository
from conversation_service.messages.schemas import message_frame_data
from conversation_service.metrics import AgentMetrics
from conversation_service.realtime.frames import MessageCreated
from conversation_service.realtime.publisher import FramePublisher
from conversation_service.turns.leases import TurnLeases
from shared.protocol import Answer, utcnow
from shared.transactions import transaction


class AgentResumer(Protocol):
    def resume(self, conversation: Conversation, message: Message, answer: Answer, *, reason: str) -> None:
        """Start, in the background, the agent turn that hands ``answer`` (stored as ``message``)
        to the agent."""


class AnswerService:
    def __init__(
        self, sessionmaker: async_sessionmaker, publisher: FramePublisher, expiry: QuestionExpiry,
        agent: AgentResumer, metrics: AgentMetrics, leases: TurnLeases, *, max_chars: int,
    ) -> None:
        self._leases = leases
        self._sessionmaker = sessionmaker
        self._publisher = publisher
        self._expiry = expiry
        self._agent = agent
        self._metrics = metrics
        self._max_chars = max_chars

    async def submit(self, user: AuthenticatedUser, conversation_id: str, body: AgentAnswerIn) -> AgentAnswerAccepted:
        if len(body.answer) > self._max_chars:
            raise PayloadTooLarge(f"the answer is limited to {self._max_chars} characters")
        async with transaction(self._sessionmaker) as session:
            conversation = await get_owned_conversation(session, user, conversation_id)  # 404 for others
            question = await InteractionRepository(session).get(body.question_id)
            if question is None or question.conversation_id != conversation.id:
                pending = await InteractionRepository(session).pending_for_conversation(conversation.id)
                raise Conflict({"message": "this is not the question the agent is waiting for",
                                "pending_question_id": pending.question_id if pending else None})
            if question.status == InteractionStatus.ANSWERED.value:
                raise Conflict({"message": "this question was answered already", "question_id": question.question_id})
            expired = question.status == InteractionStatus.EXPIRED.value or question.expires_at <= utcnow()
        if expired:
            await self._expiry.expire(question)
            raise Gone({"message": "the question expired before it was answered; send a new message to start again",
                        "question_id": question.question_id, "expired_at": question.expires_at.isoformat()})

        text = body.answer
        if question.kind == InteractionKind.APPROVAL.value and not text:
            text = "approve" if body.approved else "deny"
        async with transaction(self._sessionmaker) as session:
            message = await MessageRepository(session).create(
                conversation_id=conversation.id, role=MessageRole.USER.value, content=text,
                agent_metadata={"answer_to": question.question_id, "kind": question.kind},
            )
            # Conditional: of two concurrent answers exactly one wins; the other is a 409 and rolls back.
            if not await InteractionRepository(session).mark_answered(question.question_id, message.id):
                raise Conflict({"message": "this question was answered already", "question_id": question.question_id})
            await ConversationRepository(session).touch(conversation.id)
            await self._leases.open(session, message.id, conversation.id)
        await self._publisher.emit(conversation.id, MessageCreated(message_frame_data(message)))
        self._metrics.questions["answered"].inc()
        answer = Answer(question_id=question.question_id, text=text, approved=body.approved)
        self._agent.resume(conversation, message, answer, reason="agent_answer")
        return AgentAnswerAccepted(
            message_id=message.id, conversation_id=conversation.id, question_id=question.question_id
        )
