"""Applying the Agent Service migrations (``python -m agent_service migrate``, or on start)."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from migrations import MIGRATIONS_DIR
from shared.db import create_engine, migration_connection

SCRIPT_LOCATION = MIGRATIONS_DIR / "agent"


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    # ConfigParser interpolation would read a '%' of an escaped password as a placeholder.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


async def run_migrations(engine: AsyncEngine, action: str = "upgrade", revision: str = "head") -> None:
    """Upgrade or downgrade over a connection of ``engine`` (usable inside a running loop)."""
    config = alembic_config(engine.url.render_as_string(hide_password=False))

    def _apply(connection: Connection) -> None:
        config.attributes["connection"] = connection
        if action == "upgrade":
            command.upgrade(config, revision)
        elif action == "downgrade":
            command.downgrade(config, revision)
        else:
            raise ValueError(f"unknown migration action {action!r}")

    async with migration_connection(engine) as connection:
        await connection.run_sync(_apply)


async def migrate_url(url: str, action: str = "upgrade", revision: str = "head") -> None:
    engine = create_engine(url)
    try:
        await run_migrations(engine, action, revision)
    finally:
        await engine.dispose()
