"""Alembic environment of the Agent Service database (SQLite or PostgreSQL, async drivers).

``agent_service.migrate`` hands a live connection in ``config.attributes["connection"]`` so
migrations also run inside an already running event loop (migrate-on-start). Started by the
``alembic`` command line instead, this file opens its own async engine.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from migrations import AGENT_VERSION_TABLE
from shared.db import create_engine

# Its own version table, so the two services may share one PostgreSQL database.
VERSION_TABLE = AGENT_VERSION_TABLE

config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=None,
        version_table=VERSION_TABLE,
        # SQLite cannot ALTER most things; batch mode rebuilds tables instead.
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_async(url: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(_run)
    finally:
        await engine.dispose()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), literal_binds=True, version_table=VERSION_TABLE)
    with context.begin_transaction():
        context.run_migrations()
elif (conn := config.attributes.get("connection")) is not None:
    _run(conn)
else:
    asyncio.run(_run_async(config.get_main_option("sqlalchemy.url")))
