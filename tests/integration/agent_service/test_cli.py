"""``python -m agent_service migrate`` brings an empty database to the latest revision; ``hash-key``
prints the digest an ``AGENT_SERVICE_CALLERS`` entry holds."""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys

from sqlalchemy import inspect

from agent_service.access.resolver import CallerResolver
from agent_service.settings import AgentServiceSettings, CallerKeySettings
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


async def test_hash_key_prints_what_a_caller_entry_holds() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_service", "hash-key", cwd=REPO_ROOT,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    output, _ = await proc.communicate(b"a-partner-key\n")
    assert proc.returncode == 0
    digest = output.decode().strip()
    assert digest == hashlib.sha256(b"a-partner-key").hexdigest()
    # What it printed is a key the service takes.
    resolver = CallerResolver(AgentServiceSettings(callers=[CallerKeySettings(name="partner", key_sha256=digest)]), None)
    found = resolver.by_key("a-partner-key")
    assert found is not None and found.name == "partner"
