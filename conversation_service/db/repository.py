"""The repository base.

Repositories hold the session and only ``flush()``; the edge that opened the unit of work
(``shared.transactions.transaction``: a request dependency, a background task) commits once.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession


class Repository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session
