"""``python -m agent_service migrate`` brings an empty database to the latest revision."""

from __future__ import annotations

import asyncio
import os
import sys

from sqlalchemy import inspect

from shared.db import create_engine
from tests.support.servers import REPO_ROOT


async def test_migrate_command(database_url: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_service", "migrate", cwd=REPO_ROOT,
        env={**os.environ, "AGENT_SERVICE_DATABASE_URL": database_url},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await proc.communicate()
    assert proc.returncode == 0, output.decode()
    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            tables = set(await conn.run_sync(lambda sync: inspect(sync).get_table_names()))
    finally:
        await engine.dispose()
    assert {"agent_sessions", "agent_runs", "agent_events", "knowledge_documents"} <= tables
