from __future__ import annotations

from sqlalchemy import ColumnElement, select, update

from conversation_service.db.models import Conversation, utcnow
from conversation_service.db.repository import Repository


def _owned_by(owner_id: str, org_id: str | None) -> tuple[ColumnElement[bool], ...]:
    """A conversation belongs to (organisation, user): user ids are only unique within an
    organisation, and a token without ``org`` owns only conversations made without one."""
    org = Conversation.org_id.is_(None) if org_id is None else Conversation.org_id == org_id
    return Conversation.owner_id == owner_id, org


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
        """The conversation when it belongs to ``owner_id`` in ``org_id``; None for a stranger (also
        the same user id in another organisation) or no such id."""
        result = await self.session.execute(
            select(Conversation).where(Conversation.id == conversation_id, *_owned_by(owner_id, org_id))
        )
        return result.scalar_one_or_none()

    async def list_for_owner(
        self, owner_id: str, org_id: str | None, *, limit: int, offset: int
    ) -> list[Conversation]:
        result = await self.session.execute(
            select(Conversation)
            .where(*_owned_by(owner_id, org_id))
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
