"""Alembic environment of the ConversationService database.

Two ways in: the service (``python -m conversation_service migrate`` or migrate-on-start) hands
over an open connection through ``config.attributes["connection"]``; the ``alembic`` command line
passes a URL (``-x url=...`` or ``CONVERSATION_DATABASE_URL``) and gets its own async engine.
"""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy.engine import Connection

from conversation_service.db.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    return (
        context.get_x_argument(as_dictionary=True).get("url")
        or config.get_main_option("sqlalchemy.url")
        or os.environ.get("CONVERSATION_DATABASE_URL", "sqlite+aiosqlite:///var/conversation_service.db")
    )


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things in place; batch mode recreates the table when needed.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_with_own_engine() -> None:
    from shared.db import create_engine

    engine = create_engine(_url())
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_configure)
    finally:
        await engine.dispose()


if context.is_offline_mode():
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
    else:
        asyncio.run(_run_with_own_engine())
