"""Database engine creation shared by both services: SQLite (embedded default) or PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import DateTime, event
from sqlalchemy.engine import ExceptionContext, make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.types import TypeDecorator

from shared.fastpath.sqlite_gate import gate_writers


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def on_postgres(db: AsyncSession) -> bool:
    """Whether ``db`` runs on PostgreSQL: the repositories' one test for their PostgreSQL statements."""
    return db.get_bind().dialect.name == "postgresql"


def ensure_sqlite_dir(url: str) -> None:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)


class UTCDateTime(TypeDecorator):
    """A timestamp that is always timezone-aware UTC in Python.

    SQLite stores no offset and hands back naive datetimes; PostgreSQL stores ``timestamptz``.
    Normalising here means comparisons never mix naive and aware values on either backend.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def json_dumps(value: Any) -> str:
    """JSON column serializer: orjson, several times faster than ``json.dumps`` on the hot write
    paths (event rows, frames). A ``str`` because asyncpg's json/jsonb codecs and SQLite's TEXT
    both take text. Non-string keys are stringified, as ``json.dumps`` does."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


def json_loads(value: str | bytes) -> Any:
    return orjson.loads(value)


# SQLite's pool as SQLAlchemy sizes it by default (5 kept and 10 in overflow), all kept (see create_engine).
SQLITE_POOL_SIZE = 15


def create_engine(url: str, *, pool_size: int = 10, echo: bool = False) -> AsyncEngine:
    """An async engine tuned per backend, holding at most ``2 * pool_size`` connections to PostgreSQL
    (``SQLITE_POOL_SIZE`` to SQLite).

    Every connection a burst opened is kept for the next one (no overflow that is closed on return):
    a burst of runs used to open and close the connections above ``pool_size`` for every statement
    past it, and opening one costs the service several milliseconds of CPU (asyncpg's connect and
    SQLAlchemy's codec set-up on PostgreSQL; a thread and four pragmas on SQLite), a tenth of the
    Agent Service's CPU in a burst of 50 two-token runs. The peak is what it was (``pool_size`` and
    as many in overflow); connections are still recycled after 30 minutes.

    SQLite runs in WAL mode with a busy timeout so readers never block the single writer and two
    processes (a restart overlapping the old one) do not fail with "database is locked".
    """
    ensure_sqlite_dir(url)
    if is_sqlite(url):
        engine = create_async_engine(
            url, echo=echo, connect_args={"timeout": 30}, json_serializer=json_dumps, json_deserializer=json_loads,
            pool_size=SQLITE_POOL_SIZE, max_overflow=0,
        )

        gate_writers(engine)
        event.listen(engine.sync_engine, "handle_error", _sqlite_cancel_keeps_connection)

        @event.listens_for(engine.sync_engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record) -> None:  # pragma: no cover - trivial
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        return engine
    engine = create_async_engine(
        url, echo=echo, pool_size=2 * pool_size, max_overflow=0, pool_recycle=1800,
        json_serializer=json_dumps, json_deserializer=json_loads,
    )
    event.listen(engine.sync_engine, "checkout", _replace_closed_connection)
    return engine


def _sqlite_cancel_keeps_connection(context: ExceptionContext) -> None:
    """A statement cancelled half-way (a timeout, a cancelled task) ends like any failed statement on
    SQLite: its cursor closed, its transaction rolled back, its connection back in the pool.

    SQLAlchemy takes a cancellation for a lost connection and drops it, which suits a network driver
    (its protocol may stop mid-message) and not SQLite, whose connection lives in this process.
    Dropped, a connection whose statement was still open (an INSERT ... RETURNING whose rows were not
    fetched yet) is only half closed by sqlite3 (``sqlite3_close_v2`` waits for open statements): it
    keeps its write transaction, the database's one write lock, until the garbage collector finalises
    the statement. Every other writer then waited 30 s in SQLite's busy handler and failed with
    "database is locked" (a burst of runs whose memory writes timed out stalled for 90 s).
    """
    if isinstance(context.original_exception, (asyncio.CancelledError, TimeoutError)):
        context.is_disconnect = False


def create_lease_engine(url: str) -> AsyncEngine | None:
    """A small pool of its own for a process's lease keeper (renewals, takeovers), or None on SQLite.

    On the shared pool a renewal waits for a connection behind every request: with 100 chat turns
    starting at once on a pool of 20, one renewal waited 13.6 s, the 10 s leases of 40 running
    turns expired, and the process took its own turns over and sent those replies twice. SQLite has
    one writer at a time, queued by the shared engine's write gate, which a second engine would skip.
    """
    if is_sqlite(url):
        return None
    return create_engine(url, pool_size=2)


def _replace_closed_connection(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """A pooled connection the server closed (a restart, an idle timeout) is replaced at checkout.

    asyncpg learns of the close as soon as the event loop reads the socket's end, so asking it costs
    no round trip; ``pool_pre_ping`` asked the server instead: BEGIN, a query and ROLLBACK on every
    checkout, a fifth of the Agent Service's database time. The pool retries the checkout with a
    new connection when this raises.
    """
    if dbapi_connection.driver_connection.is_closed():
        raise DisconnectionError("the database server closed this pooled connection")


@asynccontextmanager
async def migration_connection(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection in one transaction, for Alembic's revisions. On SQLite with foreign keys off
    meanwhile: a batch operation copies a table and drops the old one, and with them on, dropping a
    parent table deletes its children's rows (``ON DELETE CASCADE``) in the middle of a migration."""
    async with engine.connect() as conn:
        sqlite = engine.dialect.name == "sqlite"
        if sqlite:
            await conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
            await conn.commit()  # the pragma takes effect only outside a transaction
        try:
            async with conn.begin():
                yield conn
        finally:
            if sqlite:
                await conn.exec_driver_sql("PRAGMA foreign_keys=ON")
                await conn.commit()


def create_sessionmaker(engine: AsyncEngine) -> async_sessionmaker:
    return async_sessionmaker(engine, expire_on_commit=False)
