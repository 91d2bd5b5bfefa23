"""Conversations: create, list, search, rename, delete; every access checks the owner.

A deleted conversation keeps its row (``deleted_at`` set, see migration c0006) and is invisible
to every query here but ``get``, which background work uses by id.
"""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import ColumnElement, select, update

from conversation_service.db.models import Conversation, utcnow
from conversation_service.db.repository import Repository


def _owned_by(owner_id: str, org_id: str | None) -> ColumnElement[bool]:
    # The same user id in another organisation is another account: its conversations are not these.
    return (
        (Conversation.owner_id == owner_id)
        & Conversation.org_id.is_not_distinct_from(org_id)
        & Conversation.deleted_at.is_(None)
    )


class ConversationRepository(Repository):
    async def create(self, *, owner_id: str, org_id: str | None, title: str) -> Conversation:
        now = utcnow()
        conversation = Conversation(owner_id=owner_id, org_id=org_id, title=title, created_at=now, updated_at=now)
        self.session.add(conversation)
        await self.session.flush()
        return conversation

    async def get(self, conversation_id: str) -> Conversation | None:
        return await self.session.get(Conversation, conversation_id)

    async def get_owned(self, conversation_id: str, owner_id: str, org_id: str | None) -> Conversation | None:
        """The conversation when it belongs to ``owner_id`` in ``org_id`` and is not deleted; None
        for a stranger, a deleted conversation or no such id."""
        return await self.session.scalar(
            select(Conversation).where(Conversation.id == conversation_id, _owned_by(owner_id, org_id))
        )

    async def list_for_owner(
        self, owner_id: str, org_id: str | None, *, limit: int, offset: int, title_contains: str | None = None
    ) -> list[Conversation]:
        query = select(Conversation).where(_owned_by(owner_id, org_id))
        if title_contains:
            # autoescape: a % or _ the user typed is matched as itself, not as a wildcard.
            query = query.where(Conversation.title.icontains(title_contains, autoescape=True))
        result = await self.session.execute(
            query.order_by(Conversation.updated_at.desc(), Conversation.id).limit(limit).offset(offset)
        )
        return list(result.scalars())

    async def touch(self, conversation_id: str) -> None:
        await self.session.execute(
            update(Conversation).where(Conversation.id == conversation_id).values(updated_at=utcnow())
        )

    async def title_if_untitled(self, conversation_id: str, title: str) -> None:
        """Names a conversation created without a title; a title already set (or a rename) stays."""
        if not title:
            return
        await self.session.execute(
            update(Conversation).where(Conversation.id == conversation_id, Conversation.title == "").values(title=title)
        )

    async def rename(self, conversation: Conversation, title: str) -> None:
        conversation.title = title
        conversation.updated_at = utcnow()
        await self.session.flush()

    async def mark_deleted(self, conversation: Conversation, now: datetime | None = None) -> None:
        conversation.deleted_at = now or utcnow()
        await self.session.flush()

    async def set_agent_status(self, conversation_id: str, status: str | None) -> None:
        """The conversation's agent state as clients see it (AWAITING_USER while a question waits)."""
        await self.session.execute(
            update(Conversation).where(Conversation.id == conversation_id).values(agent_status=status)
        )
