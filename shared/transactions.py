"""Transactions of both services: one idiom, and the way background work waits out a database restart.

``transaction(sessionmaker)`` is a unit of work: the block's changes commit when it succeeds and roll
back when it raises (request handlers, and anything that must fail at once).

``Transactions`` is for work that must not fail because the database is briefly away (a restart, a
failover, a pooled connection the server closed): a chat reply being ended, an agent turn being
recorded, a turn marked done. ``await tx.run(work)`` runs ``work(session)`` in a transaction and
commits; when the database is unavailable (``is_unavailable``) the whole transaction is run again,
with growing pauses, for up to ``budget_s``. Any other error, or the budget passing, raises. The
work is a function, not a ``with`` block, because a block cannot be run twice.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import asyncpg
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from shared.group_commit import RETRY_PAUSES_S

__all__ = ["Transactions", "autocommit", "is_unavailable", "transaction"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_ASYNCPG_GONE = (asyncpg.exceptions.PostgresConnectionError, asyncpg.exceptions.CannotConnectNowError,
                 asyncpg.exceptions.AdminShutdownError, asyncpg.exceptions.CrashShutdownError,
                 asyncpg.exceptions.TooManyConnectionsError)
# SQLite's failures of being there: its write lock not granted, its file not reachable.
_SQLITE_GONE = ("database is locked", "unable to open database", "disk i/o error")


@asynccontextmanager
async def transaction(sessionmaker: async_sessionmaker) -> AsyncIterator[AsyncSession]:
    """A session that commits when the block succeeds and rolls back when it raises."""
    async with sessionmaker() as session:
        try:
            yield session
            await session.commit()
        except BaseException:
            await session.rollback()
            raise


@asynccontextmanager
async def autocommit(sessionmaker: async_sessionmaker) -> AsyncIterator[AsyncSession]:
    """A session on PostgreSQL whose statements each commit by themselves: for a unit of work that is
    one statement, atomic alone, it saves the BEGIN and the COMMIT (two round trips, and about 0.2 ms
    of the service's CPU). The pool restores the connection's isolation level when it is returned."""
    async with sessionmaker() as session:
        await session.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
        yield session


def _causes(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    pending: list[BaseException | None] = [exc]
    while pending and len(seen) < 8:
        current = pending.pop()
        if current is None or any(current is s for s in seen):
            continue
        seen.append(current)
        pending.extend((current.__cause__, current.__context__, getattr(current, "orig", None)))
    return seen


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database was not there (refused, reset, closed, starting or stopping,
    SQLite's lock not granted, no pooled connection free within the pool's timeout under a burst)
    rather than that the statement was wrong: only then is running the same transaction again worth it."""
    for cause in _causes(exc):
        if isinstance(cause, PoolTimeout):
            return True
        if isinstance(cause, DBAPIError) and cause.connection_invalidated:
            return True
        if isinstance(cause, (ConnectionError, TimeoutError, DisconnectionError, *_ASYNCPG_GONE)):
            return True
        if isinstance(cause, OSError) and not isinstance(cause, sqlite3.Error):
            return True
        if isinstance(cause, asyncpg.exceptions.InterfaceError) and "closed" in str(cause):
            return True
        if isinstance(cause, sqlite3.OperationalError) and str(cause).lower().startswith(_SQLITE_GONE):
            return True
    return False


class Transactions:
    def __init__(self, sessionmaker: async_sessionmaker, *, budget_s: float) -> None:
        self.sessionmaker = sessionmaker
        self.budget_s = budget_s

    async def run(self, work: Callable[[AsyncSession], Awaitable[T]]) -> T:
        """``work``'s result once its transaction committed; run again while the database is away."""
        deadline = time.monotonic() + self.budget_s
        for pause in itertools.chain(RETRY_PAUSES_S, itertools.repeat(RETRY_PAUSES_S[-1])):
            try:
                async with transaction(self.sessionmaker) as session:
                    return await work(session)
            except Exception as exc:
                if not is_unavailable(exc) or time.monotonic() + pause > deadline:
                    raise
                log.warning("database unavailable; the transaction will be run again",
                            extra={"error_type": type(exc).__name__, "retry_in_s": pause})
                await asyncio.sleep(pause)
        raise AssertionError("unreachable: the pauses never run out")
