"""SQLite writers wait their turn on the event loop, not in SQLite's polling busy handler."""

from __future__ import annotations

import asyncio
import sqlite3
from weakref import WeakKeyDictionary

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.util import await_

__all__ = ["SQLiteWriteGate", "gate_writers", "write_gate"]

_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLAC")
WRITE_WAIT_S = 30.0


class SQLiteWriteGate:
    """One write transaction at a time per SQLite engine, the others waiting their turn on the event loop.

    SQLite has one writer per database; a second connection that tries to write meanwhile is put
    to sleep by SQLite's busy handler, which polls with growing sleeps (1, 2, 5, 10 ... 100 ms), so a
    small insert behind a group commit could wait 80 ms for a lock that was free after 3. Here a
    connection takes the gate at its transaction's first write and gives it back when it returns to
    the pool (right after its commit or rollback); a waiter is woken the moment it is free. The
    busy handler still guards against other processes (a CLI, a restart overlapping the old one).
    """

    def __init__(self) -> None:
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _current(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._loop is not loop:  # an engine outliving its loop (tests)
            self._lock, self._loop = asyncio.Lock(), loop
        return self._lock

    async def acquire(self) -> None:
        lock = self._current()
        try:
            async with asyncio.timeout(WRITE_WAIT_S):
                await lock.acquire()
        except TimeoutError:
            raise sqlite3.OperationalError(
                f"database is locked: no write turn within {WRITE_WAIT_S:.0f} s in this process"
            ) from None

    def release(self) -> None:
        if self._lock is not None and self._lock.locked():
            self._lock.release()

    @property
    def held(self) -> bool:
        """Whether a connection has the write turn now (health checks and tests)."""
        return self._lock is not None and self._lock.locked()


# The gate of each gated engine, for ``write_gate``; an engine disposed of and dropped takes its own.
_gates: WeakKeyDictionary[Engine, SQLiteWriteGate] = WeakKeyDictionary()


def write_gate(engine: AsyncEngine) -> SQLiteWriteGate | None:
    """The write gate of ``engine``, or None when it has none (PostgreSQL)."""
    return _gates.get(engine.sync_engine)


def gate_writers(engine: AsyncEngine) -> None:
    gate = _gates[engine.sync_engine] = SQLiteWriteGate()
    held = "sqlite_write_gate"

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def _take_turn(conn, _cursor, statement, _parameters, _context, _many) -> None:
        if statement.lstrip()[:6].upper() in _WRITES and not conn.info.get(held):
            await_(gate.acquire())  # inside SQLAlchemy's greenlet: the loop runs meanwhile
            conn.info[held] = True

    def _give_back(_dbapi_connection, record, *_args) -> None:
        if record.info.pop(held, False):
            gate.release()

    for name in ("checkin", "invalidate", "close", "detach"):
        event.listen(engine.sync_engine.pool, name, _give_back)
