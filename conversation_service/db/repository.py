"""The repository base and the unit of work.

Repositories hold the session and only ``flush()``; the edge that opened the unit of work (a
request dependency, a background task) commits once.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from shared.transactions import transaction


class Repository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session


# The unit of work of both services (``shared.transactions``): commits on success, rolls back on error.
unit_of_work = transaction
