"""The repository base and the unit of work.

Repositories hold the session and only ``flush()``; the edge that opened the unit of work (a
request dependency, a background task) commits once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker


class Repository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session


@asynccontextmanager
async def unit_of_work(sessionmaker: async_sessionmaker) -> AsyncIterator[AsyncSession]:
    """A session that commits when the block succeeds and rolls back when it raises."""
    async with sessionmaker() as session:
        try:
            yield session
            await session.commit()
        except BaseException:
            await session.rollback()
            raise
