from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import bindparam, case, func, insert, select, text, update

from conversation_service.db.models import Conversation, ConversationFrame, Turn, TurnKind, utcnow
from conversation_service.db.repository import Repository
from conversation_service.realtime.frames import Frame, FrameType, TurnProgress, with_delta
from shared.db import UTCDateTime, json_dumps, on_postgres
from shared.storable import NUL_IN_JSON, storable

_conversations = Conversation.__table__
_turns = Turn.__table__
# Core statements on the tables, run as executemany (one parameter set per conversation or turn).
_RAISE_LAST_SEQ = (
    update(_conversations)
    .where(_conversations.c.id == bindparam("b_id"), _conversations.c.last_seq < bindparam("b_seq"))
    .values(last_seq=bindparam("b_seq"))
)
_RECORD_PROGRESS = (
    update(_turns)
    .where(_turns.c.id == bindparam("b_id"), _turns.c.last_agent_seq <= bindparam("b_seq"))
    .values(kind=TurnKind.AGENT.value, assistant_message_id=bindparam("b_message"),
            agent_session_id=bindparam("b_session"), last_agent_seq=bindparam("b_seq"), updated_at=bindparam("b_now"))
)

# PostgreSQL: a batch's frames go as one JSON document the server unpacks, one statement per batch,
# as the Agent Service writes its events: binding them row by row costs the bind processing and
# asyncpg's encoding of five values per frame on the event loop.
_PG_INSERT_FRAMES = text(
    "INSERT INTO conversation_frames (conversation_id, seq, type, data, created_at) "
    "SELECT conversation_id, seq, type, data, :now FROM json_to_recordset(CAST(:rows AS json)) "
    "AS f(conversation_id text, seq bigint, type text, data jsonb)"
).bindparams(bindparam("now", type_=UTCDateTime()))


def _frames_document(frames: Sequence[Frame]) -> str:
    rows = [{"conversation_id": f.conversation_id, "seq": f.seq, "type": f.type, "data": f.data} for f in frames]
    document = json_dumps(rows)
    if NUL_IN_JSON in document:
        # jsonb refuses a NUL, and would refuse the batch with it: every streaming conversation's
        # frames. Text from the agent and the model is made storable where it comes in; this covers
        # any other frame's data.
        document = json_dumps([row | {"data": storable(row["data"])} for row in rows])
    return document


class FrameRepository(Repository):
    async def insert_many(self, frames: Sequence[Frame]) -> None:
        if not frames:
            return
        now = utcnow()
        if on_postgres(self.session):
            await self.session.execute(_PG_INSERT_FRAMES, {"rows": _frames_document(frames), "now": now})
        else:
            # A Core insert on the table: the ORM's bulk-insert path costs more per row than the
            # executemany itself (it was ~10 % of the event loop's time under streaming load).
            await self.session.execute(
                insert(ConversationFrame.__table__),
                [
                    {"conversation_id": f.conversation_id, "seq": f.seq, "type": f.type, "data": f.data,
                     "created_at": now}
                    for f in frames
                ],
            )
        highest: dict[str, int] = {}
        for f in frames:
            highest[f.conversation_id] = max(highest.get(f.conversation_id, 0), f.seq)
        # One executemany per statement, not one execute per conversation: a batch holds the
        # frames of every streaming conversation, and each execute is a round trip (a thread hop
        # on SQLite) plus the ORM's bulk-update bookkeeping. Monotonic even when two replicas'
        # writers commit out of order.
        await self.session.execute(
            _RAISE_LAST_SEQ, [{"b_id": cid, "b_seq": seq} for cid, seq in highest.items()]
        )
        await self._record_progress(frames)

    async def _record_progress(self, frames: Sequence[Frame]) -> None:
        """The turns' progress, in the frames' transaction: a takeover resumes after what is stored."""
        latest: dict[str, TurnProgress] = {}
        for f in frames:
            if f.progress is not None:
                known = latest.get(f.progress.turn_id)
                if known is None or f.progress.agent_seq >= known.agent_seq:
                    latest[f.progress.turn_id] = f.progress
        if not latest:
            return
        now = utcnow()
        await self.session.execute(_RECORD_PROGRESS, [
            {"b_id": p.turn_id, "b_seq": p.agent_seq, "b_message": p.message_id, "b_session": p.agent_session_id,
             "b_now": now}
            for p in latest.values()
        ])

    async def message_frames(self, conversation_id: str, message_id: str) -> list[Frame]:
        """The stored frames about one message (its deltas, its end), in seq order."""
        result = await self.session.execute(
            select(ConversationFrame.type, ConversationFrame.seq, ConversationFrame.data)
            .where(ConversationFrame.conversation_id == conversation_id,
                   ConversationFrame.data["message_id"].as_string() == message_id)
            .order_by(ConversationFrame.seq)
        )
        return [Frame(type=t, seq=s, conversation_id=conversation_id, data=d) for t, s, d in result.all()]

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
        deltas: list[tuple[str, object]] = []  # newest first: (text, offset)
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
                    return _text_of(deltas), last
                if type_ == FrameType.MESSAGE_DELTA and data.get("message_id") == message_id:
                    deltas.append((str(data.get("text", "")), data.get("offset")))
                    last = seq if last is None else last
            if len(rows) < batch:
                return _text_of(deltas), last
            below = rows[-1][0]

    async def max_seq(self, conversation_id: str) -> int:
        result = await self.session.execute(
            select(func.max(ConversationFrame.seq)).where(ConversationFrame.conversation_id == conversation_id)
        )
        return int(result.scalar_one() or 0)


class SeqReservationRepository(Repository):
    """``conversations.seq_reserved``: only ever raised, except by ``release`` from a value this
    process itself set (a compare-and-set: a reservation someone raised since stays)."""

    async def take_block(self, conversation_id: str, *, above: int, block: int) -> int:
        base = case((Conversation.seq_reserved > above, Conversation.seq_reserved), else_=above)
        result = await self.session.execute(
            update(Conversation).where(Conversation.id == conversation_id)
            .values(seq_reserved=base + block).returning(Conversation.seq_reserved)
        )
        reserved = result.scalar_one_or_none()
        # No such conversation: its frames cannot be stored either (foreign key); count in memory.
        return int(reserved) if reserved is not None else above + block

    async def cover(self, conversation_id: str, seq: int, *, block: int) -> tuple[int, int]:
        """Raise the reservation to ``seq + block`` when below ``seq``; the reservation and the
        highest seq handed out without Redis (``seq_without_redis``), as they are now."""
        await self.session.execute(
            update(Conversation).where(Conversation.id == conversation_id, Conversation.seq_reserved < seq)
            .values(seq_reserved=seq + block)
        )
        row = (await self.session.execute(
            select(Conversation.seq_reserved, Conversation.seq_without_redis).where(Conversation.id == conversation_id)
        )).one_or_none()
        if row is None:  # no such conversation: its frames cannot be stored either (foreign key)
            return seq + block, 0
        return max(int(row[0]), seq), int(row[1])

    async def take_without_redis(self, conversation_id: str) -> int:
        """The next seq straight from the reservation, recorded as handed out without Redis."""
        result = await self.session.execute(
            update(Conversation).where(Conversation.id == conversation_id)
            .values(seq_reserved=Conversation.seq_reserved + 1, seq_without_redis=Conversation.seq_reserved + 1)
            .returning(Conversation.seq_reserved)
        )
        taken = result.scalar_one_or_none()
        if taken is None:
            raise LookupError(f"no conversation {conversation_id}")
        return int(taken)

    async def reserved(self, conversation_id: str) -> int:
        result = await self.session.execute(
            select(Conversation.seq_reserved).where(Conversation.id == conversation_id)
        )
        return int(result.scalar_one_or_none() or 0)

    async def release(self, unused: dict[str, tuple[int, int]]) -> None:
        for conversation_id, (last, limit) in unused.items():
            await self.session.execute(
                update(Conversation)
                .where(Conversation.id == conversation_id, Conversation.seq_reserved == limit)
                .values(seq_reserved=last)
            )


def _text_of(newest_first: list[tuple[str, object]]) -> str:
    """The text deltas read newest first add up to, each applied at its offset (``with_delta``)."""
    text = ""
    for delta, offset in reversed(newest_first):
        text = with_delta(text, delta, offset)
    return text
