"""What the tenancy tests share: the users of their identity provider, the owner's secret that no refused
answer may hold, a memory of the owner's made directly in the Agent Service's store, and the backend check
of their module-wide worlds."""

from __future__ import annotations

from typing import Any

import pytest

from agent_service.memory.store import Owner
from shared.protocol import utcnow
from tests.support.databases import postgres_available

SECRET = "Secretname"
USERS = {
    "alice": {"password": "wonderland", "org": "acme"},
    "carol": {"password": "christmas", "org": "acme"},
    "bob": {"password": "builder", "org": "globex"},
}


def require_backend(backend: str) -> None:
    if backend == "postgres" and not postgres_available():
        pytest.fail("PostgreSQL is required (CI=true or TEST_POSTGRES=1) but does not answer on 127.0.0.1:5432")


async def alices_memory(agent_app: Any) -> int:
    """A memory of alice@acme's (a completed turn makes one in the background; this one is at once)."""
    store = agent_app.state.agent.memory.store
    return (await store.remember(Owner("alice", "acme"), f"Her name is Alice {SECRET}", None, utcnow())).id
