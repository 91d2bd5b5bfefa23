"""Answer the agent's question; look at the conversation's agent session and its pending question."""

from __future__ import annotations

from fastapi import APIRouter, status

from conversation_service.agent_sessions.repository import AgentSessionRepository
from conversation_service.db.models import InteractionStatus
from conversation_service.deps import AnswerServiceDep, CurrentUser, OwnedConversation, SessionDep
from conversation_service.interactions.repository import InteractionRepository
from conversation_service.interactions.schemas import (
    AgentAnswerAccepted,
    AgentAnswerIn,
    AgentSessionOut,
    PendingQuestionOut,
)
from shared.http_contract import BODY_ERRORS, errors

_ERRORS = {401: "missing, invalid or expired bearer token", 404: "no such conversation of the caller's"}

router = APIRouter(prefix="/conversations", tags=["agent"])


@router.post(
    "/{conversation_id}/agent-answer",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=AgentAnswerAccepted,
    responses=errors({
        **_ERRORS, **BODY_ERRORS, 409: "not the pending question, or answered already", 410: "the question expired",
    }),
)
async def agent_answer(
    conversation_id: str, body: AgentAnswerIn, answers: AnswerServiceDep, user: CurrentUser
) -> AgentAnswerAccepted:
    """Answer the agent's pending question; the resumed run streams on the WebSocket.

    409 when ``question_id`` is not the pending question or was answered already; 410 when it
    expired (the agent session is then abandoned and the next message starts a fresh one).
    """
    return await answers.submit(user, conversation_id, body)


@router.get("/{conversation_id}/agent-session", response_model=AgentSessionOut,
            responses=errors(_ERRORS))
async def agent_session(conversation: OwnedConversation, session: SessionDep) -> AgentSessionOut:
    """The conversation's most recent agent session and its pending question, if any."""
    row = await AgentSessionRepository(session).get_latest_for_conversation(conversation.id)
    if row is None:
        return AgentSessionOut(conversation_id=conversation.id)
    pending = None
    if row.pending_question_id:
        question = await InteractionRepository(session).get(row.pending_question_id)
        if question is not None and question.status == InteractionStatus.PENDING.value:
            pending = PendingQuestionOut(
                question_id=question.question_id, question=question.question, kind=question.kind,
                tool=question.tool, args=question.args, asked_at=question.asked_at, expires_at=question.expires_at,
            )
    return AgentSessionOut(
        conversation_id=conversation.id, id=row.id, agent_session_id=row.agent_session_id,
        profile_name=row.profile_name, status=row.status, created_at=row.created_at,
        last_interaction_at=row.last_interaction_at, pending_question=pending,
    )
