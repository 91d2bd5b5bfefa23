from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Query, Response, status

from conversation_service.conversations import service
from conversation_service.conversations.deps import OwnedConversation
from conversation_service.conversations.schemas import (
    ConversationCreate,
    ConversationList,
    ConversationOut,
    ConversationUpdate,
)
from conversation_service.deps import CurrentUser, RealtimeDep, SessionDep
from conversation_service.realtime.frames import ConversationDeleted
from shared.http_contract import BODY_ERRORS, errors

router = APIRouter(prefix="/conversations", tags=["conversations"])

_ERRORS = {401: "missing, invalid or expired bearer token", 404: "no such conversation of the caller's"}


@router.post(
    "", status_code=status.HTTP_201_CREATED, response_model=ConversationOut, responses=errors({**_ERRORS, **BODY_ERRORS})
)
async def create_conversation(body: ConversationCreate, session: SessionDep, user: CurrentUser) -> ConversationOut:
    """Without a title, the conversation is titled after its first message."""
    conversation = await service.create_conversation(session, user, body.title)
    return ConversationOut.model_validate(conversation)


@router.get("", response_model=ConversationList, responses=errors(_ERRORS))
async def list_conversations(
    session: SessionDep,
    user: CurrentUser,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    offset: Annotated[int, Query(ge=0, le=100_000)] = 0,
    q: Annotated[str | None, Query(max_length=200, description="only titles containing this, any case")] = None,
) -> ConversationList:
    """The caller's conversations, most recently active first."""
    items = await service.list_conversations(session, user, limit=limit, offset=offset, q=q)
    return ConversationList(items=[ConversationOut.model_validate(c) for c in items], limit=limit, offset=offset)


@router.get("/{conversation_id}", response_model=ConversationOut, responses=errors(_ERRORS))
async def get_conversation(conversation: OwnedConversation) -> ConversationOut:
    return ConversationOut.model_validate(conversation)


@router.patch("/{conversation_id}", response_model=ConversationOut, responses=errors({**_ERRORS, **BODY_ERRORS}))
async def rename_conversation(
    body: ConversationUpdate, conversation: OwnedConversation, session: SessionDep
) -> ConversationOut:
    """Rename: the title is 1 to 200 characters once surrounding blanks are dropped."""
    await service.rename_conversation(session, conversation, body.title)
    return ConversationOut.model_validate(conversation)


@router.delete("/{conversation_id}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response,
               responses=errors(_ERRORS))
async def delete_conversation(
    conversation: OwnedConversation, session: SessionDep, realtime: RealtimeDep, after: BackgroundTasks
) -> None:
    """Delete: from now on the conversation answers 404 everywhere (REST and WebSocket).

    A reply still streaming runs to its end unseen; the owner's other open pages are told with a
    ``conversation.deleted`` frame."""
    await service.delete_conversation(session, conversation)
    # After the response, so after the commit: a page is never told of a delete that rolled back.
    after.add_task(realtime.publisher.emit, conversation.id, ConversationDeleted(conversation.id), boundary=True)
