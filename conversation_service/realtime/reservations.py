"""``SeqReservations``: the durable frame seq reservation of each conversation
(``conversations.seq_reserved``), one short transaction per change, run again while the database is
briefly away. See ``seq`` for why."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from conversation_service.realtime.repository import SeqReservationRepository
from shared.transactions import Transactions


class SeqReservations:
    def __init__(self, transactions: Transactions) -> None:
        self._tx = transactions

    async def take_block(self, conversation_id: str, *, above: int, block: int) -> int:
        async def take(session: AsyncSession) -> int:
            return await SeqReservationRepository(session).take_block(conversation_id, above=above, block=block)

        return await self._tx.run(take)

    async def cover(self, conversation_id: str, seq: int, *, block: int) -> tuple[int, int]:
        async def cover(session: AsyncSession) -> tuple[int, int]:
            return await SeqReservationRepository(session).cover(conversation_id, seq, block=block)

        return await self._tx.run(cover)

    async def take_without_redis(self, conversation_id: str) -> int:
        async def take(session: AsyncSession) -> int:
            return await SeqReservationRepository(session).take_without_redis(conversation_id)

        return await self._tx.run(take)

    async def reserved(self, conversation_id: str) -> int:
        async def read(session: AsyncSession) -> int:
            return await SeqReservationRepository(session).reserved(conversation_id)

        return await self._tx.run(read)

    async def release(self, unused: dict[str, tuple[int, int]]) -> None:
        async def release(session: AsyncSession) -> None:
            await SeqReservationRepository(session).release(unused)

        await self._tx.run(release)
