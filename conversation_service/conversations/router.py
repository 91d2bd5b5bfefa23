from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from conversation_service.conversations import service
from conversation_service.conversations.schemas import ConversationCreate, ConversationList, ConversationOut
from conversation_service.deps import CurrentUser, OwnedConversation, SessionDep
from shared.http_contract import BODY_ERRORS, errors

router = APIRouter(prefix="/conversations", tags=["conversations"])

_ERRORS = {401: "missing, invalid or expired bearer token", 404: "no such conversation of the caller's"}


@router.post(
    "", status_code=status.HTTP_201_CREATED, response_model=ConversationOut, responses=errors({**_ERRORS, **BODY_ERRORS})
)
async def create_conversation(body: ConversationCreate, session: SessionDep, user: CurrentUser) -> ConversationOut:
    conversation = await service.create_conversation(session, user, body.title)
    return ConversationOut.model_validate(conversation)


@router.get("", response_model=ConversationList, responses=errors(_ERRORS))
async def list_conversations(
    session: SessionDep,
    user: CurrentUser,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    offset: Annotated[int, Query(ge=0, le=100_000)] = 0,
) -> ConversationList:
    items = await service.list_conversations(session, user, limit=limit, offset=offset)
    return ConversationList(items=[ConversationOut.model_validate(c) for c in items], limit=limit, offset=offset)


@router.get("/{conversation_id}", response_model=ConversationOut, responses=errors(_ERRORS))
async def get_conversation(conversation: OwnedConversation) -> ConversationOut:
    return ConversationOut.model_validate(conversation)
