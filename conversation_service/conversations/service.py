"""Conversations as their owner sees them: create, find, search, rename, delete."""

from __future__ import annotations

import re

from sqlalchemy.ext.asyncio import AsyncSession

from conversation_service.auth.tokens import AuthenticatedUser
from conversation_service.conversations.repository import ConversationRepository
from conversation_service.db.models import Conversation
from conversation_service.errors import NotFound

TITLE_CHARS = 80  # long enough to tell conversations apart in the list, short enough for one line
# "/agent plan a trip" is titled "plan a trip": a leading slash command routes the message, it is
# not what the conversation is about.
_COMMAND = re.compile(r"^/\w+\s+(?=\S)")


def title_from_message(text: str) -> str:
    """A title made of a conversation's first message: one line, cut at a word near TITLE_CHARS."""
    line = " ".join(text.split())
    line = _COMMAND.sub("", line)
    if len(line) <= TITLE_CHARS:
        return line
    cut = line[: TITLE_CHARS - 1]
    space = cut.rfind(" ")
    if space > TITLE_CHARS // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


async def create_conversation(session: AsyncSession, user: AuthenticatedUser, title: str) -> Conversation:
    return await ConversationRepository(session).create(
        owner_id=user.user_id, org_id=user.org_id, title=title.strip()
    )


async def get_owned_conversation(session: AsyncSession, user: AuthenticatedUser, conversation_id: str) -> Conversation:
    """The caller's conversation, or NotFound, also when it exists but belongs to someone else
    (another user, or the same user id in another organisation) or was deleted."""
    if not conversation_id or len(conversation_id) > 64:
        raise NotFound("conversation not found")
    conversation = await ConversationRepository(session).get_owned(conversation_id, user.user_id, user.org_id)
    if conversation is None:
        raise NotFound("conversation not found")
    return conversation


async def list_conversations(
    session: AsyncSession, user: AuthenticatedUser, *, limit: int, offset: int, q: str | None = None
) -> list[Conversation]:
    """Most recently active first; ``q``: only those whose title contains it (any case)."""
    q = " ".join(q.split()) if q else None
    return await ConversationRepository(session).list_for_owner(
        user.user_id, user.org_id, limit=limit, offset=offset, title_contains=q
    )


async def name_after_first_message(session: AsyncSession, conversation: Conversation, content: str) -> None:
    """An untitled conversation takes its title from the message just stored in it."""
    if conversation.title:
        return  # the common case costs no statement
    await ConversationRepository(session).title_if_untitled(conversation.id, title_from_message(content))


async def rename_conversation(session: AsyncSession, conversation: Conversation, title: str) -> Conversation:
    await ConversationRepository(session).rename(conversation, title)
    return conversation


async def delete_conversation(session: AsyncSession, conversation: Conversation) -> None:
    await ConversationRepository(session).mark_deleted(conversation)
