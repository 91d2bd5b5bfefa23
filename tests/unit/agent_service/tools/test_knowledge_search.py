"""Knowledge search on SQLite (FTS5) and PostgreSQL (tsvector + GIN), schema from migration a0002."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import inspect

from agent_service.migrate import migrate_url
from agent_service.tools.base import ToolContext, ToolError
from agent_service.tools.knowledge.indexer import (
    DEFAULT_KNOWLEDGE_SOURCES,
    MAX_FILE_BYTES,
    IndexReport,
    index_knowledge,
)
from agent_service.tools.knowledge.repository import KnowledgeRepository, query_terms
from agent_service.tools.knowledge_search import KnowledgeSearchTool
from shared.db import create_engine, create_sessionmaker
from shared.protocol import UserContext

CTX = ToolContext(session_id="s", run_id="r", user_context=UserContext(user_id="u"))

DOCS = {
    "reliability.md": "# Reliability\n\nThe circuit breaker opens after five failures in sixty seconds. "
    "While it is open, messages go to the direct model with a notice.\n\nRetries use exponential backoff.",
    "streaming.md": "# Streaming\n\nEvents stream over SSE. A heartbeat comment is sent every fifteen seconds "
    "so proxies keep the connection open. Clients resume with Last-Event-ID.",
    "guides/deploy.md": "# Deployment\n\nRun two replicas behind nginx. Redis carries the fan-out between "
    "replicas. PostgreSQL stores every event.",
    "notes.txt": "Plain text notes about the breaker dashboard in Grafana.",
}


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "kb"
    for name, content in DOCS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(content)
    (root / ".hidden").mkdir()
    (root / ".hidden" / "secret.md").write_text("# Secret\ncircuit breaker")
    (root / "image.png").write_bytes(b"\x89PNG circuit breaker")
    return root


@pytest.fixture
async def sessionmaker(database_url: str):
    await migrate_url(database_url)
    engine = create_engine(database_url)
    try:
        yield create_sessionmaker(engine)
    finally:
        await engine.dispose()


async def test_migration_is_reversible(database_url: str) -> None:
    def tables(sync_conn) -> set[str]:
        return set(inspect(sync_conn).get_table_names())

    def columns(sync_conn) -> set[str]:
        return {c["name"] for c in inspect(sync_conn).get_columns("knowledge_documents")}

    engine = create_engine(database_url)
    try:
        for _ in range(2):  # upgrade -> downgrade -> upgrade -> downgrade
            await migrate_url(database_url, "upgrade", "a0002")
            async with engine.connect() as conn:
                assert "knowledge_documents" in await conn.run_sync(tables)
                if engine.dialect.name == "postgresql":
                    assert "search_vector" in await conn.run_sync(columns)
                else:
                    assert "knowledge_documents_fts" in await conn.run_sync(tables)
            await migrate_url(database_url, "downgrade", "a0001")
            async with engine.connect() as conn:
                remaining = await conn.run_sync(tables)
                assert not {t for t in remaining if t.startswith("knowledge_documents")}
                assert "agent_sessions" in remaining
    finally:
        await engine.dispose()


async def test_indexing_is_idempotent_by_content_hash(sessionmaker, corpus: Path) -> None:
    assert await index_knowledge(sessionmaker, corpus) == IndexReport(added=4, updated=0, unchanged=0, removed=0, skipped=0)
    assert await index_knowledge(sessionmaker, corpus) == IndexReport(added=0, updated=0, unchanged=4, removed=0, skipped=0)

    (corpus / "streaming.md").write_text("# Streaming\n\nNow over WebSockets too.")
    (corpus / "notes.txt").unlink()
    (corpus / "big.md").write_text("x" * (MAX_FILE_BYTES + 1))
    assert await index_knowledge(sessionmaker, corpus) == IndexReport(added=0, updated=1, unchanged=2, removed=1, skipped=1)

    async with sessionmaker() as session:
        repository = KnowledgeRepository(session)
        assert sorted(await repository.hashes_by_path()) == ["kb/guides/deploy.md", "kb/reliability.md",
                                                              "kb/streaming.md"]
        # The full-text index followed the update and the delete.
        assert await repository.search(["websockets"], 5) != []
        assert await repository.search(["heartbeat"], 5) == []
        assert await repository.search(["grafana"], 5) == []


async def test_search_ranks_and_snippets(sessionmaker, corpus: Path) -> None:
    await index_knowledge(sessionmaker, corpus)
    tool = KnowledgeSearchTool(sessionmaker)
    result = await tool.run({"query": "what do the docs say about the circuit breaker?"}, CTX)
    assert result["query"] == "what do the docs say about the circuit breaker?"
    hits = result["results"]
    assert [h["path"] for h in hits] == ["kb/reliability.md", "kb/notes.txt"]
    top = hits[0]
    assert top["title"] == "Reliability"
    assert "**circuit**" in top["snippet"] and "**breaker**" in top["snippet"]
    assert top["score"] > hits[1]["score"]
    assert hits[1]["title"] == "Notes"


async def test_search_stems_words_and_weights_titles(sessionmaker, corpus: Path) -> None:
    await index_knowledge(sessionmaker, corpus)
    tool = KnowledgeSearchTool(sessionmaker)
    retries = await tool.run({"query": "retry"}, CTX)
    assert [h["path"] for h in retries["results"]] == ["kb/reliability.md"]
    deployment = await tool.run({"query": "deployment replicas"}, CTX)
    assert deployment["results"][0]["path"] == "kb/guides/deploy.md"
    assert (await tool.run({"query": "kubernetes helm"}, CTX))["results"] == []


async def test_top_k_limits_results(sessionmaker, corpus: Path) -> None:
    await index_knowledge(sessionmaker, corpus)
    tool = KnowledgeSearchTool(sessionmaker)
    everything = await tool.run({"query": "breaker heartbeat replicas", "top_k": 10}, CTX)
    assert len(everything["results"]) == 4
    assert len((await tool.run({"query": "breaker heartbeat replicas", "top_k": 2}, CTX))["results"]) == 2


async def test_hostile_queries_are_plain_words(sessionmaker, corpus: Path) -> None:
    await index_knowledge(sessionmaker, corpus)
    tool = KnowledgeSearchTool(sessionmaker)
    for query in ['breaker" OR "', "breaker & !heartbeat | (", "NEAR(breaker", "'; DROP TABLE knowledge_documents;--"]:
        result = await tool.run({"query": query}, CTX)
        assert isinstance(result["results"], list)
    hits = (await tool.run({"query": 'breaker" OR "'}, CTX))["results"]
    assert {h["path"] for h in hits} == {"kb/reliability.md", "kb/notes.txt"}
    async with sessionmaker() as session:
        assert len(await KnowledgeRepository(session).hashes_by_path()) == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "'query'"),
        ({"query": "   "}, "'query'"),
        ({"query": "x" * 501}, "too long"),
        ({"query": "?!"}, "at least one word"),
        ({"query": "breaker", "top_k": 0}, "top_k"),
        ({"query": "breaker", "top_k": 11}, "top_k"),
        ({"query": "breaker", "top_k": True}, "top_k"),
    ],
)
async def test_argument_validation(sessionmaker, args, message) -> None:
    with pytest.raises(ToolError, match=message):
        await KnowledgeSearchTool(sessionmaker).run(args, CTX)


def test_query_terms() -> None:
    assert query_terms("What do the docs say about the Circuit Breaker?") == ["circuit", "breaker"]
    assert query_terms("the") == ["the"]
    assert query_terms('a"b OR c*') == ["b", "c"]
    assert len(query_terms(" ".join(f"w{i}" for i in range(100)))) == 32


async def test_default_sources_are_the_project_docs(sessionmaker) -> None:
    assert [p.name for p in DEFAULT_KNOWLEDGE_SOURCES] == ["docs", "README.md"]
    report = await index_knowledge(sessionmaker)
    assert report.added >= 1
    async with sessionmaker() as session:
        assert "README.md" in await KnowledgeRepository(session).hashes_by_path()
    result = await KnowledgeSearchTool(sessionmaker).run({"query": "TaskForce bridge"}, CTX)
    assert "README.md" in [h["path"] for h in result["results"]]


async def test_missing_sources_leave_the_index_as_it_was_and_name_the_setting(
    sessionmaker, corpus: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """An installed wheel has no docs/ beside it, and a replica may start without its folder: the documents
    indexed before stay searchable, and the log says which setting to set."""
    await index_knowledge(sessionmaker, corpus)
    with caplog.at_level("WARNING", logger="agent_service.tools.knowledge.indexer"):
        report = await index_knowledge(sessionmaker, tmp_path / "not-there")
    assert report == IndexReport(added=0, updated=0, unchanged=0, removed=0, skipped=0)
    assert any("AGENT_SERVICE_KNOWLEDGE_DIR" in r.getMessage() for r in caplog.records), caplog.records
    async with sessionmaker() as session:
        assert len(await KnowledgeRepository(session).hashes_by_path()) == 4
