from __future__ import annotations

from sqlalchemy import select, update

from conversation_service.db.models import Conversation, utcnow
from conversation_service.db.repository import Repository


class ConversationRepository(Repository):
    async def create(self, *, owner_id: str, org_id: str | None, title: str) -> Conversation:
        now = utcnow()
        conversation = Conversation(owner_id=owner_id, org_id=org_id, title=title, created_at=now, updated_at=now)
        self.session.add(conversation)
        await self.session.flush()
        return conversation

    async def get(self, conversation_id: str) -> Conversation | None:
        return await self.session.get(Conversation, conversation_id)

    async def get_owned(self, conversation_id: str, owner_id: str) -> Conversation | None:
        """The conversation when it belongs to ``owner_id``; None for a stranger or no such id."""
        return await self.session.scalar(
            select(Conversation).where(Conversation.id == conversation_id, Conversation.owner_id == owner_id)
        )

    async def list_for_owner(self, owner_id: str, *, limit: int, offset: int) -> list[Conversation]:
        result = await self.session.execute(
            select(Conversation)
            .where(Conversation.owner_id == owner_id)
            .order_by(Conversation.updated_at.desc(), Conversation.id)
            .limit(limit)
            .offset(offset)
        )
        return list(result.scalars())

    async def touch(self, conversation_id: str) -> None:
        await self.session.execute(
            update(Conversation).where(Conversation.id == conversation_id).values(updated_at=utcnow())
        )

    async def set_agent_status(self, conversation_id: str, status: str | None) -> None:
        """The conversation's agent state as clients see it (AWAITING_USER while a question waits)."""
        await self.session.execute(
            update(Conversation).where(Conversation.id == conversation_id).values(agent_status=status)
        )
