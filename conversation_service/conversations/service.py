from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from conversation_service.auth.tokens import AuthenticatedUser
from conversation_service.conversations.repository import ConversationRepository
from conversation_service.db.models import Conversation
from conversation_service.errors import NotFound


async def create_conversation(session: AsyncSession, user: AuthenticatedUser, title: str) -> Conversation:
    return await ConversationRepository(session).create(
        owner_id=user.user_id, org_id=user.org_id, title=title.strip()
    )


async def get_owned_conversation(session: AsyncSession, user: AuthenticatedUser, conversation_id: str) -> Conversation:
    """The caller's conversation, or NotFound, also when it exists but belongs to someone else
    (another user, or the same user id in another organisation)."""
    if not conversation_id or len(conversation_id) > 64:
        raise NotFound("conversation not found")
    conversation = await ConversationRepository(session).get_owned(conversation_id, user.user_id, user.org_id)
    if conversation is None:
        raise NotFound("conversation not found")
    return conversation


async def list_conversations(
    session: AsyncSession, user: AuthenticatedUser, *, limit: int, offset: int
) -> list[Conversation]:
    return await ConversationRepository(session).list_for_owner(
        user.user_id, user.org_id, limit=limit, offset=offset
    )
