"""Database engine creation shared by both services: SQLite (embedded default) or PostgreSQL."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlalchemy.util import await_


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def ensure_sqlite_dir(url: str) -> None:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)


def json_dumps(value: Any) -> str:
    """JSON column serializer: orjson, several times faster than ``json.dumps`` on the hot write
    paths (event rows, frames). A ``str`` because asyncpg's json/jsonb codecs and SQLite's TEXT
    both take text. Non-string keys are stringified, as ``json.dumps`` does."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


def json_loads(value: str | bytes) -> Any:
    return orjson.loads(value)


def create_engine(url: str, *, pool_size: int = 10, echo: bool = False) -> AsyncEngine:
    """An async engine tuned per backend.

    SQLite runs in WAL mode with a busy timeout so readers never block the single writer and two
    processes (a restart overlapping the old one) do not fail with "database is locked".
    """
    ensure_sqlite_dir(url)
    if is_sqlite(url):
        engine = create_async_engine(
            url, echo=echo, connect_args={"timeout": 30}, json_serializer=json_dumps, json_deserializer=json_loads
        )

        _gate_writers(engine)

        @event.listens_for(engine.sync_engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record) -> None:  # pragma: no cover - trivial
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        return engine
    return create_async_engine(
        url, echo=echo, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True, pool_recycle=1800,
        json_serializer=json_dumps, json_deserializer=json_loads,
    )


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


def _gate_writers(engine: AsyncEngine) -> None:
    gate = SQLiteWriteGate()
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


def create_sessionmaker(engine: AsyncEngine) -> async_sessionmaker:
    return async_sessionmaker(engine, expire_on_commit=False)
