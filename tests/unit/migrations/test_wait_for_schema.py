"""``migrate --wait``: a release's replicas wait for the release's migration Job, not for ever, and not
for a database a later release already migrated (a rollback runs on the schema it expanded)."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text

from agent_service.__main__ import main as agent_main
from agent_service.migrate import SCRIPT_LOCATION, run_migrations
from conversation_service.db import migrate as chat_migrate
from migrations import AGENT_VERSION_TABLE, CONVERSATION_VERSION_TABLE
from migrations.wait import schema_is_current, wait_for_schema
from shared.db import create_engine


async def test_the_agent_database_is_current_once_migrated_or_past_this_release(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        started = time.monotonic()
        assert not await wait_for_schema(database_url, SCRIPT_LOCATION, AGENT_VERSION_TABLE, timeout_s=0.3, poll_s=0.1)
        assert time.monotonic() - started < 5
        await run_migrations(engine)
        assert await schema_is_current(engine, SCRIPT_LOCATION, AGENT_VERSION_TABLE)
        await run_migrations(engine, "downgrade", "-1")  # the release before's schema: not this one's
        assert not await schema_is_current(engine, SCRIPT_LOCATION, AGENT_VERSION_TABLE)
        async with engine.begin() as conn:  # a later release's revision, which this one does not know
            await conn.execute(text(f"UPDATE {AGENT_VERSION_TABLE} SET version_num = 'a9999_later'"))
        assert await wait_for_schema(database_url, SCRIPT_LOCATION, AGENT_VERSION_TABLE, timeout_s=5)
    finally:
        await engine.dispose()


async def test_the_conversation_database_is_current_once_migrated(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        assert not await schema_is_current(engine, chat_migrate.MIGRATIONS_DIR, CONVERSATION_VERSION_TABLE)
        await chat_migrate.upgrade(engine)
        assert await wait_for_schema(database_url, chat_migrate.MIGRATIONS_DIR, CONVERSATION_VERSION_TABLE, timeout_s=5)
    finally:
        await engine.dispose()


def test_a_database_that_does_not_answer_is_waited_for_then_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the command line the init container runs: a non-zero exit past the time allowed."""
    monkeypatch.setenv("AGENT_SERVICE_DATABASE_URL", "postgresql+asyncpg://postgres@127.0.0.1:9/nothing")
    started = time.monotonic()
    with pytest.raises(SystemExit) as exited:
        agent_main(["migrate", "--wait", "0.5"])
    assert "not migrated" in str(exited.value.code)
    assert time.monotonic() - started < 5
