"""``SeqReservations``: the durable frame seq reservation of each conversation
(``conversations.seq_reserved``), one short transaction per change. See ``seq`` for why."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import async_sessionmaker

from conversation_service.db.repository import unit_of_work
from conversation_service.realtime.repository import SeqReservationRepository


class SeqReservations:
    def __init__(self, sessionmaker: async_sessionmaker) -> None:
        self._sessionmaker = sessionmaker

    async def take_block(self, conversation_id: str, *, above: int, block: int) -> int:
        async with unit_of_work(self._sessionmaker) as session:
            return await SeqReservationRepository(session).take_block(conversation_id, above=above, block=block)

    async def cover(self, conversation_id: str, seq: int, *, block: int) -> int:
        async with unit_of_work(self._sessionmaker) as session:
            return await SeqReservationRepository(session).cover(conversation_id, seq, block=block)

    async def reserved(self, conversation_id: str) -> int:
        async with unit_of_work(self._sessionmaker) as session:
            return await SeqReservationRepository(session).reserved(conversation_id)

    async def release(self, unused: dict[str, tuple[int, int]]) -> None:
        async with unit_of_work(self._sessionmaker) as session:
            await SeqReservationRepository(session).release(unused)
