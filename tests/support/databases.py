"""Fresh databases for tests: a SQLite file, or a throw-away PostgreSQL database.

Which backends run: SQLite always; PostgreSQL when it answers, and always when ``CI=true`` or
``TEST_POSTGRES=1`` (then a missing server fails the tests instead of skipping them).
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlparse

import asyncpg

POSTGRES_ADMIN_DSN = os.environ.get("TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes")


def services_required() -> bool:
    """On CI, PostgreSQL and Redis are part of the test bed: absence is a failure."""
    return _truthy("CI") or _truthy("TEST_POSTGRES")


def _port_open(url: str, default_port: int) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or default_port), timeout=0.5):
            return True
    except OSError:
        return False


def postgres_available() -> bool:
    return _port_open(POSTGRES_ADMIN_DSN, 5432)


def redis_available() -> bool:
    return _port_open(REDIS_URL, 6379)


def backends() -> list[str]:
    names = ["sqlite"]
    if services_required() or postgres_available():
        names.append("postgres")
    return names


@asynccontextmanager
async def fresh_database(backend: str, tmp_dir: Path, prefix: str = "tf") -> AsyncIterator[str]:
    """Yield the SQLAlchemy URL of an empty database, dropped afterwards."""
    if backend == "sqlite":
        path = tmp_dir / f"{prefix}-{uuid.uuid4().hex[:8]}.db"
        yield f"sqlite+aiosqlite:///{path}"
        return
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(POSTGRES_ADMIN_DSN)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    parsed = urlparse(POSTGRES_ADMIN_DSN)
    netloc = parsed.netloc
    try:
        yield f"postgresql+asyncpg://{netloc}/{name}"
    finally:
        admin = await asyncpg.connect(POSTGRES_ADMIN_DSN)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
