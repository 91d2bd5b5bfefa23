from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, insert, select, update

from conversation_service.db.models import Conversation, ConversationFrame, utcnow
from conversation_service.db.repository import Repository
from conversation_service.realtime.frames import Frame, FrameType


class FrameRepository(Repository):
    async def insert_many(self, frames: Sequence[Frame]) -> None:
        if not frames:
            return
        now = utcnow()
        # A Core insert on the table: the ORM's bulk-insert path costs more per row than the
        # executemany itself (it was ~10 % of the event loop's time under streaming load).
        await self.session.execute(
            insert(ConversationFrame.__table__),
            [
                {"conversation_id": f.conversation_id, "seq": f.seq, "type": f.type, "data": f.data, "created_at": now}
                for f in frames
            ],
        )
        highest: dict[str, int] = {}
        for f in frames:
            highest[f.conversation_id] = max(highest.get(f.conversation_id, 0), f.seq)
        for conversation_id, seq in highest.items():
            # Monotonic even when two replicas' writers commit out of order.
            await self.session.execute(
                update(Conversation)
                .where(Conversation.id == conversation_id, Conversation.last_seq < seq)
                .values(last_seq=seq)
            )

    async def list_after(self, conversation_id: str, after_seq: int, *, limit: int) -> list[Frame]:
        result = await self.session.execute(
            select(ConversationFrame.type, ConversationFrame.seq, ConversationFrame.data)
            .where(ConversationFrame.conversation_id == conversation_id, ConversationFrame.seq > after_seq)
            .order_by(ConversationFrame.seq)
            .limit(limit)
        )
        return [Frame(type=t, seq=s, conversation_id=conversation_id, data=d) for t, s, d in result.all()]

    async def streamed_text(
        self, conversation_id: str, message_id: str, *, started_at: datetime, batch: int = 500
    ) -> tuple[str, int | None]:
        """The text a message still streaming has so far, from its ``message.delta`` frames, and
        the seq of the last one (None when there is none yet).

        Read newest first, back to the message's ``message.created`` frame: the cost is the
        frames since the reply began, not the conversation's whole log. A frame committed before
        ``started_at`` cannot belong to the message either, so a created frame that was never
        persisted does not send the read back to the conversation's start.
        """
        parts: list[str] = []
        last: int | None = None
        below: int | None = None
        while True:
            query = select(
                ConversationFrame.seq, ConversationFrame.type, ConversationFrame.data, ConversationFrame.created_at
            ).where(ConversationFrame.conversation_id == conversation_id)
            if below is not None:
                query = query.where(ConversationFrame.seq < below)
            rows = (await self.session.execute(query.order_by(ConversationFrame.seq.desc()).limit(batch))).all()
            for seq, type_, data, created_at in rows:
                if created_at < started_at or (type_ == FrameType.MESSAGE_CREATED and data.get("id") == message_id):
                    return "".join(reversed(parts)), last
                if type_ == FrameType.MESSAGE_DELTA and data.get("message_id") == message_id:
                    parts.append(str(data.get("text", "")))
                    last = seq if last is None else last
            if len(rows) < batch:
                return "".join(reversed(parts)), last
            below = rows[-1][0]

    async def max_seq(self, conversation_id: str) -> int:
        result = await self.session.execute(
            select(func.max(ConversationFrame.seq)).where(ConversationFrame.conversation_id == conversation_id)
        )
        return int(result.scalar_one() or 0)
