"""``OwnedConversation``: the conversation of the path, checked to belong to the caller."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path

from conversation_service.conversations.service import get_owned_conversation
from conversation_service.db.models import Conversation
from conversation_service.deps import CurrentUser, SessionDep


async def get_owned(
    session: SessionDep, user: CurrentUser, conversation_id: Annotated[str, Path(max_length=64)]
) -> Conversation:
    return await get_owned_conversation(session, user, conversation_id)


OwnedConversation = Annotated[Conversation, Depends(get_owned)]
