"""Answer the agent's question; look at the conversation's agent session and its pending question."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, status

from conversation_service.agent_sessions.repository import AgentSessionRepository
from conversation_service.conversations.deps import OwnedConversation
from conversation_service.db.models import InteractionStatus
from conversation_service.deps import CurrentUser, SessionDep
from conversation_service.interactions.repository import InteractionRepository
from conversation_service.interactions.schemas import (
    AgentAnswerAccepted,
    AgentAnswerIn,
    AgentQuestionList,
    AgentQuestionOut,
    AgentSessionOut,
    PendingQuestionOut,
)
from conversation_service.interactions.service import AnswerService
from shared.app_state import started
from shared.http_contract import BODY_ERRORS, errors
from shared.protocol import utcnow

_ERRORS = {401: "missing, invalid or expired bearer token", 404: "no such conversation of the caller's"}

router = APIRouter(prefix="/conversations", tags=["agent"])
AnswerServiceDep = Annotated[AnswerService, Depends(started("agent", "answers"))]


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
    out = AgentSessionOut.model_validate(row)
    if row.pending_question_id:
        question = await InteractionRepository(session).get(row.pending_question_id)
        if question is not None and question.status == InteractionStatus.PENDING.value:
            out.pending_question = PendingQuestionOut.model_validate(question)
    return out


@router.get("/{conversation_id}/agent-questions", response_model=AgentQuestionList,
            responses=errors(_ERRORS))
async def agent_questions(
    conversation: OwnedConversation, session: SessionDep, limit: Annotated[int, Query(ge=1, le=500)] = 200
) -> AgentQuestionList:
    """The agent's questions in this conversation (the last ``limit``, oldest first) and how each
    stands: what a page shows on its question cards after a reload."""
    now = utcnow()
    items = []
    for row in await InteractionRepository(session).list_for_conversation(conversation.id, limit=limit):
        item = AgentQuestionOut.model_validate(row)
        if item.status == InteractionStatus.PENDING.value and item.expires_at <= now:
            item.status = InteractionStatus.EXPIRED.value
        items.append(item)
    return AgentQuestionList(items=items, limit=limit)
