from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.databases import (
    REDIS_URL,
    backends,
    fresh_database,
    postgres_available,
    redis_available,
    services_required,
)

# The suite never talks to a real LLM: the built-in offline model unless a test says otherwise.
os.environ.setdefault("LLM_PROVIDER", "builtin")
# ...at full speed: the pace of a real model is for people, tests wait for nothing.
os.environ.setdefault("LLM_BUILTIN_FIRST_TOKEN_MS", "0")
os.environ.setdefault("LLM_BUILTIN_CHUNK_DELAY_MS", "0")


@pytest.fixture(params=backends())
def db_backend(request) -> str:
    """Each test using a database runs on SQLite and, when present (always on CI), PostgreSQL."""
    if request.param == "postgres" and not postgres_available():
        pytest.fail("PostgreSQL is required (CI=true or TEST_POSTGRES=1) but does not answer on 127.0.0.1:5432")
    return request.param


@pytest.fixture
async def database_url(db_backend: str, tmp_path: Path):
    async with fresh_database(db_backend, tmp_path) as url:
        yield url


@pytest.fixture
async def postgres_url(tmp_path: Path):
    """A fresh PostgreSQL database, for tests of what only PostgreSQL does (LISTEN/NOTIFY). Where
    ``db_backend`` has no postgres parameter these tests are deselected (``pytest_collection_modifyitems``)."""
    if not postgres_available():
        pytest.fail("PostgreSQL is required (CI=true or TEST_POSTGRES=1) but does not answer on 127.0.0.1:5432")
    async with fresh_database("postgres", tmp_path) as url:
        yield url


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without PostgreSQL (a laptop, not CI) a PostgreSQL-only test goes the way of the postgres
    parameter of ``db_backend``: it is not run, rather than reported as skipped."""
    if "postgres" in backends():
        return
    postgres_only = [item for item in items if "postgres_url" in getattr(item, "fixturenames", ())]
    if postgres_only:
        config.hook.pytest_deselected(items=postgres_only)
        items[:] = [item for item in items if item not in postgres_only]


@pytest.fixture
async def database_factory(db_backend: str, tmp_path: Path):
    """For tests that need more than one database (two services) on the same backend."""
    from contextlib import AsyncExitStack

    async with AsyncExitStack() as stack:

        async def make(prefix: str = "tf") -> str:
            return await stack.enter_async_context(fresh_database(db_backend, tmp_path, prefix))

        yield make


@pytest.fixture
def redis_url() -> str:
    if not redis_available():
        if services_required():
            pytest.fail(f"Redis is required (CI=true) but does not answer at {REDIS_URL}")
        pytest.skip("Redis is not running here; CI runs this test against a real Redis")
    return REDIS_URL
