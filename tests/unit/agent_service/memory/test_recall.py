"""Salience = 0.7 × relevance + 0.3 × recency, then the token budget; a failing store never raises."""

from __future__ import annotations

from datetime import timedelta

from agent_service.memory.health import MemoryHealth, MemoryHealthState
from agent_service.memory.recall import LongTermMemory, memory_message, salience_ranked
from agent_service.memory.store import Candidate, Memory, Owner
from agent_service.metrics import AgentMetrics
from shared.protocol import utcnow

NOW = utcnow()
DAY = 24 * 3600.0


def _candidate(content: str, relevance: float, age_days: float) -> Candidate:
    return Candidate(Memory(1, content, NOW - timedelta(days=age_days)), relevance)


def test_salience_weighs_relevance_and_recency() -> None:
    ranked = salience_ranked(
        [_candidate("old but exact", 10.0, 30), _candidate("new and close", 8.0, 0), _candidate("new, weak", 1.0, 0)],
        NOW, half_life_s=7 * DAY,
    )
    assert [s.content for s in ranked] == ["new and close", "old but exact", "new, weak"]
    assert abs(ranked[0].salience - (0.7 * 0.8 + 0.3 * 1.0)) < 1e-9
    assert abs(ranked[1].salience - (0.7 * 1.0 + 0.3 * 0.5 ** (30 / 7))) < 1e-9


class Store:
    def __init__(self, candidates: list[Candidate] | None = None, error: Exception | None = None) -> None:
        self.candidates = candidates or []
        self.error = error
        self.limits: list[int] = []

    async def recall(self, owner: Owner, query: str, limit: int) -> list[Candidate]:
        self.limits.append(limit)
        if self.error is not None:
            raise self.error
        return self.candidates


def _memory(store, budget: int = 1000, **health) -> LongTermMemory:
    metrics = AgentMetrics()
    return LongTermMemory(store, MemoryHealth(**health), metrics.memory_failures, metrics.memory_writes_dropped,
                          token_budget=budget, recency_half_life_s=DAY, timeout_s=1)


async def test_recall_keeps_top_k_within_the_token_budget() -> None:
    long = "word " * 200
    store = Store([_candidate(long, 10, 0), _candidate("short fact", 5, 0), _candidate("another", 4, 0)])
    snippets = await _memory(store, budget=50).recall(Owner("u", "o"), "fact")
    assert [s.content for s in snippets] == ["short fact", "another"], "the long one does not fit the budget"
    assert store.limits == [8 * 3]
    message = memory_message(snippets)
    assert message is not None and message.role == "system" and "- short fact" in message.content


async def test_a_failing_store_degrades_and_recalls_fewer() -> None:
    store = Store(error=OSError("connection refused"))
    memory = _memory(store)
    assert await memory.recall(Owner("u", None), "fact") == []
    assert memory.health.state() is MemoryHealthState.DEGRADED
    await memory.recall(Owner("u", None), "fact")
    assert store.limits == [24, 9], "DEGRADED asks for k=3"
