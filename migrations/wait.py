"""Whether a database carries this release's migrations, and waiting until it does.

On Kubernetes (deploy/kubernetes/) a release's migration Job upgrades each database while its new
replicas wait in an init container (``python -m <service> migrate --wait SECONDS``), so that they start
only on the schema they were written for; the replicas of the release before keep serving meanwhile,
which the migrations allow (expand, then contract: docs/architecture.md). A database whose revision this
release does not know was migrated by a later release: that is a schema this release works on too (a
rollback), so it does not wait for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.db import create_engine

log = logging.getLogger(__name__)


def _known(script: ScriptDirectory, revision: str) -> bool:
    try:
        return script.get_revision(revision) is not None
    except CommandError:
        return False


async def schema_is_current(engine: AsyncEngine, script_location: Path, version_table: str) -> bool:
    """Whether the database is at this release's heads (or at a later release's revisions)."""
    script = ScriptDirectory(str(script_location))

    def current(connection: Connection) -> set[str]:
        context = MigrationContext.configure(connection, opts={"version_table": version_table})
        return set(context.get_current_heads())

    async with engine.connect() as connection:
        revisions = await connection.run_sync(current)
    if revisions == set(script.get_heads()):
        return True
    return any(not _known(script, revision) for revision in revisions)


async def wait_for_schema(
    url: str, script_location: Path, version_table: str, *, timeout_s: float, poll_s: float = 2.0,
) -> bool:
    """Poll until the database carries this release's migrations (True) or ``timeout_s`` passes (False);
    a database that does not answer yet is waited for too."""
    deadline = time.monotonic() + timeout_s
    engine = create_engine(url)
    try:
        while True:
            try:
                if await schema_is_current(engine, script_location, version_table):
                    return True
                log.info("waiting for the database's migrations", extra={"database": engine.url.database})
            except (OSError, Exception) as exc:  # noqa: BLE001 - not reachable yet is a reason to wait, not to fail
                log.info("waiting for the database", extra={"error": type(exc).__name__})
            if time.monotonic() + poll_s > deadline:
                return False
            await asyncio.sleep(poll_s)
    finally:
        await engine.dispose()
