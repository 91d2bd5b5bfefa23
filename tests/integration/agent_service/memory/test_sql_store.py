"""The full-text memory store on SQLite (FTS5) and PostgreSQL (tsvector): recall by relevance within
one owner, listing newest first, deleting one or all of an owner's memories and nobody else's."""

from __future__ import annotations

from datetime import timedelta

from agent_service.memory.sql_store import SqlMemoryStore
from agent_service.memory.store import Owner
from agent_service.migrate import run_migrations
from shared.db import create_engine, create_sessionmaker
from shared.protocol import utcnow

ALICE = Owner("alice", "acme")


async def test_recall_list_and_delete_stay_within_one_owner(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        await run_migrations(engine)
        store = SqlMemoryStore(create_sessionmaker(engine))
        now = utcnow()
        colour = await store.remember(ALICE, "User: my favourite colour is green", "s1", now - timedelta(hours=2))
        await store.remember(ALICE, "User: my dog is called Rex", "s2", now - timedelta(hours=1))
        await store.remember(ALICE, "User: the colour of the sky and the favourite colour of my cat", "s3", now)
        await store.remember(Owner("bob", "acme"), "User: my favourite colour is blue", "s4", now)
        await store.remember(Owner("alice", "globex"), "User: my favourite colour is red", "s5", now)
        await store.remember(Owner("alice", None), "User: my favourite colour is pink", "s6", now)

        hits = await store.recall(ALICE, "what is my favourite colour?", 10)
        assert {h.memory.content for h in hits} == {
            "User: my favourite colour is green", "User: the colour of the sky and the favourite colour of my cat",
        }
        assert all(h.relevance > 0 for h in hits)
        assert hits[0].memory.created_at.tzinfo is not None
        assert [h.memory.content for h in await store.recall(Owner("alice", None), "favourite colour", 10)] == [
            "User: my favourite colour is pink"]
        assert await store.recall(ALICE, "", 10) == []

        listed = await store.list(ALICE, 10)
        assert [m.session_id for m in listed] == ["s3", "s2", "s1"], "newest first"

        assert await store.delete(Owner("bob", "acme"), colour.id) == 0, "another owner's memory is not deleted"
        assert await store.delete(ALICE, colour.id) == 1
        assert [m.session_id for m in await store.list(ALICE, 10)] == ["s3", "s2"]
        assert await store.delete(ALICE) == 2
        assert await store.list(ALICE, 10) == []
        assert [m.session_id for m in await store.list(Owner("bob", "acme"), 10)] == ["s4"]
    finally:
        await engine.dispose()
