"""The text so far of messages still being written, for a client that opens the conversation
mid-reply (a reload, a second tab): the stored row of a streaming message has no text until it
completes, its deltas are in the frame log."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from conversation_service.db.models import MessageStatus
from conversation_service.messages.schemas import MessageOut
from conversation_service.realtime.repository import FrameRepository

# Frames carry their commit time, the message its creation time, from the clocks of the replicas
# that wrote them: the log is read back a little further than the message's age.
CLOCK_MARGIN = timedelta(minutes=1)


async def with_streamed_text(session: AsyncSession, messages: list[MessageOut]) -> list[MessageOut]:
    """``messages`` with each streaming one's text so far in ``content`` and ``content_seq``."""
    frames = FrameRepository(session)
    for message in messages:
        if message.status != MessageStatus.STREAMING.value:
            continue
        text, seq = await frames.streamed_text(
            message.conversation_id, message.id, started_at=message.created_at - CLOCK_MARGIN
        )
        # A row that has its text already (a finished one read mid-update) keeps it.
        if seq is not None and not message.content:
            message.content, message.content_seq = text, seq
    return messages
