from __future__ import annotations

from typing import Any

from sqlalchemy import and_, or_, select, update

from conversation_service.db.models import Message, MessageRole, MessageStatus
from conversation_service.db.repository import Repository

# The messages a prompt's history is made of: the finished ones, and a reply the user stopped, whose
# text so far they kept (a later "go on" continues it). Replaced and failed replies never are.
IN_PROMPTS = or_(
    Message.status == MessageStatus.COMPLETE.value,
    and_(Message.status == MessageStatus.STOPPED.value, Message.content != ""),
)


class MessageRepository(Repository):
    async def create(self, *, conversation_id: str, role: str, content: str, **columns: Any) -> Message:
        """A new message; ``columns`` are its other columns (``status``, ``client_message_id``,
        ``agent_session_id``, ``agent_metadata``), each defaulting as the model says."""
        message = Message(conversation_id=conversation_id, role=role, content=content, **columns)
        self.session.add(message)
        await self.session.flush()
        return message

    async def get(self, message_id: str) -> Message | None:
        return await self.session.get(Message, message_id)

    async def get_by_client_id(self, conversation_id: str, client_message_id: str) -> Message | None:
        result = await self.session.execute(
            select(Message).where(
                Message.conversation_id == conversation_id, Message.client_message_id == client_message_id
            )
        )
        return result.scalar_one_or_none()

    async def list(self, conversation_id: str, *, limit: int, offset: int) -> list[Message]:
        """Oldest first."""
        result = await self.session.execute(
            select(Message)
            .where(Message.conversation_id == conversation_id)
            .order_by(Message.created_at, Message.id)
            .limit(limit)
            .offset(offset)
        )
        return list(result.scalars())

    async def recent_complete(self, conversation_id: str, limit: int) -> list[Message]:
        """The last ``limit`` messages of prompts (``IN_PROMPTS``), oldest first: the direct path's history."""
        result = await self.session.execute(
            select(Message)
            .where(Message.conversation_id == conversation_id, IN_PROMPTS)
            .order_by(Message.created_at.desc(), Message.id.desc())
            .limit(limit)
        )
        return list(reversed(result.scalars().all()))

    async def last_shown(self, conversation_id: str) -> Message | None:
        """The conversation's newest message that is not replaced: what the page shows last."""
        result = await self.session.execute(
            select(Message)
            .where(Message.conversation_id == conversation_id, Message.status != MessageStatus.REPLACED.value)
            .order_by(Message.created_at.desc(), Message.id.desc())
            .limit(1)
        )
        return result.scalar_one_or_none()

    async def finish(self, message_id: str, *, content: str, status: str, agent_metadata: dict[str, Any] | None = None) -> None:
        values: dict[str, Any] = {"content": content, "status": status}
        if agent_metadata is not None:
            values["agent_metadata"] = agent_metadata
        await self.session.execute(update(Message).where(Message.id == message_id).values(**values))

    async def end_reply(
        self, message_id: str, *, conversation_id: str, content: str, status: str,
        agent_metadata: dict[str, Any] | None, new_metadata: dict[str, Any], agent_session_id: str | None = None,
    ) -> Message | None:
        """Store a reply's end (``agent_metadata`` None: its metadata stays as it is). The assistant
        message is created, with ``new_metadata``, when it is not there yet (its start was never
        written: the replica died first, or the reply failed before it opened). Returns the message
        when it was created."""
        values: dict[str, Any] = {"content": content, "status": status}
        if agent_metadata is not None:
            values["agent_metadata"] = agent_metadata
        ended = await self.session.execute(update(Message).where(Message.id == message_id).values(**values))
        if ended.rowcount:
            return None
        return await self.create(
            id=message_id, conversation_id=conversation_id, role=MessageRole.ASSISTANT.value, content=content,
            status=status, agent_session_id=agent_session_id, agent_metadata=agent_metadata or new_metadata,
        )

    async def open_reply(self, message: Message) -> None:
        """A reply's message as it starts (streaming), unless it is there already."""
        if await self.get(message.id) is None:
            self.session.add(message)
            await self.session.flush()

    async def set_agent_metadata(self, message_id: str, agent_metadata: dict[str, Any]) -> None:
        await self.session.execute(update(Message).where(Message.id == message_id).values(agent_metadata=agent_metadata))

    async def complete_before(self, message: Message, limit: int) -> list[Message]:
        """Finished messages written before ``message`` (not itself), at most ``limit``, oldest first:
        the history an agent request is windowed from."""
        result = await self.session.execute(
            select(Message)
            .where(
                Message.conversation_id == message.conversation_id,
                IN_PROMPTS,
                Message.id != message.id,
                Message.created_at <= message.created_at,
            )
            .order_by(Message.created_at.desc(), Message.id.desc())
            .limit(limit)
        )
        return list(reversed(result.scalars().all()))
