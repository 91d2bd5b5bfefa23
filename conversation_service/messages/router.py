from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from conversation_service.conversations.deps import OwnedConversation
from conversation_service.deps import CurrentUser, SessionDep
from conversation_service.messages.deps import MessageServiceDep
from conversation_service.messages.repository import MessageRepository
from conversation_service.messages.schemas import MessageAccepted, MessageCreate, MessageList, MessageOut
from conversation_service.messages.streaming import with_streamed_text
from shared.http_contract import BODY_ERRORS, errors

router = APIRouter(prefix="/conversations", tags=["messages"])

_ERRORS = {401: "missing, invalid or expired bearer token", 404: "no such conversation of the caller's"}


@router.get("/{conversation_id}/messages", response_model=MessageList, responses=errors(_ERRORS))
async def list_messages(
    conversation: OwnedConversation,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
) -> MessageList:
    """Messages oldest first. A message still streaming has its text so far and ``content_seq``:
    the ``message.delta`` frames after that seq continue it."""
    rows = await MessageRepository(session).list(conversation.id, limit=limit, offset=offset)
    items = await with_streamed_text(session, [MessageOut.model_validate(m) for m in rows])
    return MessageList(items=items, limit=limit, offset=offset)


@router.post(
    "/{conversation_id}/messages",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=MessageAccepted,
    responses=errors({**_ERRORS, **BODY_ERRORS, 413: "the body or the message is larger than allowed",
                      503: "busy: every place for a reply is taken and the queue is full; retry after Retry-After"}),
)
async def post_message(
    conversation_id: str, body: MessageCreate, messages: MessageServiceDep, user: CurrentUser
) -> MessageAccepted:
    """Store the message and answer at once; the reply streams on the conversation's WebSocket.

    A repeat of a ``client_message_id`` answers with the first result and creates nothing.
    """
    # The service owns its units of work: the message must be committed before the reply starts.
    return await messages.post(user, conversation_id, body.content, body.client_message_id)
