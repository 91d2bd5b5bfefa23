"""Cancellations injected into database calls, and the checks that nothing was left held after them.

``cancel_statements`` cancels the task that runs a statement while the statement is in the driver
(its ``before_cursor_execute`` schedules the cancel; it lands in the driver's await, after the SQLite
write gate was taken), as a timeout or a cancelled task would at the worst moment. ``nothing_held``
checks an engine afterwards: every pooled connection checked in, the SQLite write gate free and no
write lock on the file (a second connection writes at once), on PostgreSQL no other session of the
database still in a transaction or holding a lock.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import asyncpg
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.util import await_

from shared.fastpath.sqlite_gate import write_gate


@contextmanager
def cancel_statements(
    engine: AsyncEngine, *, chance: float | Callable[[asyncio.Task, str], float] = 1.0,
    where: Callable[[str], bool] = lambda _sql: True, rng: random.Random | None = None,
    cancel: Callable[[asyncio.Task], object] = asyncio.Task.cancel,
) -> Iterator[list[str]]:
    """While the block runs, cancel the task of each statement ``where`` accepts, with probability
    ``chance`` (or ``chance(task, statement)``: 0 spares it); ``cancel`` does it (a timeout's
    ``reschedule`` to now, to cancel as that timeout would). Yields the statements cancelled so far."""
    rng = rng or random.Random(0)
    cancelled: list[str] = []

    armed = True

    def cancel_it(_conn, _cursor, statement: str, *_args) -> None:
        task = asyncio.current_task()
        if not armed or task is None or not where(statement):
            return
        if rng.random() >= (chance(task, statement) if callable(chance) else chance):
            return
        cancelled.append(statement)
        asyncio.get_running_loop().call_soon(cancel, task)

    # Left registered, disarmed, afterwards: removing a listener while a statement of another task
    # iterates the listeners (waiting in the write gate's) would break that statement.
    event.listen(engine.sync_engine, "before_cursor_execute", cancel_it)
    try:
        yield cancelled
    finally:
        armed = False


@contextmanager
def hold_statements(
    engine: AsyncEngine, release: asyncio.Event, *, where: Callable[[str], bool],
    on_hold: Callable[[str], object] = lambda _sql: None,
) -> Iterator[list[str]]:
    """While the block runs, each statement ``where`` accepts waits (its connection checked out, on
    SQLite before it takes the write turn) until ``release`` is set: a slow store, for real.
    ``on_hold(statement)`` runs first, in the statement's greenlet (it may ``await_``). Yields the
    statements held so far."""
    held: list[str] = []
    armed = True

    def hold(_conn, clause, *_args) -> None:
        # Before the statement reaches the cursor, and so the write gate (``before_cursor_execute``).
        if not armed:
            return
        statement = str(clause)
        if where(statement):
            held.append(statement)
            on_hold(statement)
            await_(release.wait())

    event.listen(engine.sync_engine, "before_execute", hold)  # left registered, disarmed: see above
    try:
        yield held
    finally:
        armed = False


async def held_by(engine: AsyncEngine) -> list[str]:
    """What the engine's connections still hold; empty when nothing is."""
    held = []
    if engine.pool.checkedout():
        held.append(f"{engine.pool.checkedout()} pooled connection(s) checked out")
    url = engine.url
    if url.get_backend_name() == "sqlite":
        gate = write_gate(engine)
        if gate is not None and gate.held:
            held.append("the SQLite write gate")
        if not _sqlite_writable(url.database):
            held.append("SQLite's write lock (another connection cannot write)")
        return held
    dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn)
    try:
        busy = await conn.fetch(
            "SELECT pid, state, left(query, 60) AS query FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND (state LIKE 'idle in transaction%' OR state = 'active')")
        locks = await conn.fetchval(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE a.datname = current_database() AND l.pid <> pg_backend_pid() AND l.locktype <> 'virtualxid'")
    finally:
        await conn.close()
    held += [f"PostgreSQL session {row['pid']} {row['state']}: {row['query']}" for row in busy]
    if locks:
        held.append(f"{locks} PostgreSQL lock(s)")
    return held


def _sqlite_writable(path: str | None) -> bool:
    assert path, "a SQLite file database"
    side = sqlite3.connect(path, timeout=0)
    try:
        side.execute("BEGIN IMMEDIATE")
        side.rollback()
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        side.close()


def database_path(url: str) -> str | None:
    return make_url(url).database
