"""Run the Alembic revisions of ``migrations/conversation`` from inside the service.

The service already has an async engine; Alembic is synchronous, so the migration runs through
``AsyncConnection.run_sync`` on a connection handed to ``env.py``.
"""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from sqlalchemy.ext.asyncio import AsyncEngine

from migrations import MIGRATIONS_DIR as ALL_MIGRATIONS
from shared.db import create_engine, migration_connection

MIGRATIONS_DIR = ALL_MIGRATIONS / "conversation"
HEAD = "head"


def alembic_config() -> Config:
    config = Config(str(MIGRATIONS_DIR / "alembic.ini"))
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


async def _run(engine: AsyncEngine, fn, *args) -> None:
    config = alembic_config()

    def run(sync_connection) -> None:
        config.attributes["connection"] = sync_connection
        fn(config, *args)

    async with migration_connection(engine) as conn:
        await conn.run_sync(run)


async def upgrade(engine: AsyncEngine, revision: str = HEAD) -> None:
    await _run(engine, command.upgrade, revision)


async def downgrade(engine: AsyncEngine, revision: str) -> None:
    await _run(engine, command.downgrade, revision)


async def upgrade_url(url: str, revision: str = HEAD) -> None:
    engine = create_engine(url)
    try:
        await upgrade(engine, revision)
    finally:
        await engine.dispose()
