"""``LongTermMemory``: what a run recalls before its model calls, and what a completed turn leaves.

A recall asks the store for candidates by relevance, scores each ``0.7 × relevance + 0.3 × recency``
(relevance scaled to the best candidate's, recency halving every ``recency_half_life_s``), keeps the
top k the health state allows and clips them to a token budget. Every store call is bounded in time;
a failure or a timeout only degrades the memory's health (and is counted): the run goes on with its
history alone.
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass
from datetime import datetime

from prometheus_client import Counter

from agent_service.memory.health import MemoryHealth, MemoryHealthState
from agent_service.memory.store import Candidate, MemoryStore, Owner
from shared.llm.base import LLMMessage
from shared.protocol import utcnow
from shared.tokens import count_tokens

log = logging.getLogger(__name__)

RELEVANCE_WEIGHT = 0.7
RECENCY_WEIGHT = 0.3
# Candidates fetched per memory kept: the salience ranking picks among them.
CANDIDATES_PER_SLOT = 3
MEMORY_HEADER = "What the user told you in earlier conversations (most relevant first):"


@dataclass(frozen=True, slots=True)
class Snippet:
    content: str
    salience: float


class LongTermMemory:
    def __init__(
        self, store: MemoryStore, health: MemoryHealth, failures: Counter, *, token_budget: int,
        recency_half_life_s: float, timeout_s: float,
    ) -> None:
        self.store = store
        self.health = health
        self._failures = failures
        self.token_budget = token_budget
        self.recency_half_life_s = recency_half_life_s
        self.timeout_s = timeout_s

    async def recall(self, owner: Owner, query: str) -> list[Snippet]:
        k = self.health.top_k()
        if k == 0 or not query.strip():
            return []
        try:
            async with asyncio.timeout(self.timeout_s):
                candidates = await self.store.recall(owner, query, k * CANDIDATES_PER_SLOT)
        except Exception as exc:  # noqa: BLE001 - the store's failure is the memory's, never the run's
            self._failed("recall", exc)
            return []
        self.health.succeeded()
        return self._clip(salience_ranked(candidates, utcnow(), self.recency_half_life_s)[:k])

    async def remember(self, owner: Owner, user_message: str, answer: str, session_id: str | None) -> None:
        if self.health.state() is MemoryHealthState.DOWN or not user_message.strip():
            return
        content = f"User: {user_message.strip()}\nAssistant: {answer.strip()}"
        try:
            async with asyncio.timeout(self.timeout_s):
                await self.store.remember(owner, content, session_id, utcnow())
        except Exception as exc:  # noqa: BLE001 - idem: the turn is not remembered, the run is done
            self._failed("remember", exc)
            return
        self.health.succeeded()

    def _failed(self, operation: str, exc: Exception) -> None:
        self.health.failed()
        self._failures.labels(operation).inc()
        log.warning(
            "memory store failed; runs go on without it",
            extra={"operation": operation, "error_type": type(exc).__name__, "memory_health": self.health.state().name},
        )

    def _clip(self, ranked: list[Snippet]) -> list[Snippet]:
        kept, used = [], 0
        for snippet in ranked:
            tokens = count_tokens(snippet.content)
            if used + tokens > self.token_budget:
                continue  # a shorter, less salient one may still fit
            kept.append(snippet)
            used += tokens
        return kept


def salience_ranked(candidates: list[Candidate], now: datetime, half_life_s: float) -> list[Snippet]:
    """Candidates by ``0.7 × relevance + 0.3 × recency``, best first; both terms in [0, 1]."""
    if not candidates:
        return []
    best = max(c.relevance for c in candidates)
    scored = []
    for candidate in candidates:
        relevance = candidate.relevance / best if best > 0 else 0.0
        age_s = max((now - candidate.memory.created_at).total_seconds(), 0.0)
        recency = math.pow(0.5, age_s / half_life_s)
        scored.append(Snippet(candidate.memory.content, RELEVANCE_WEIGHT * relevance + RECENCY_WEIGHT * recency))
    return sorted(scored, key=lambda s: s.salience, reverse=True)


def memory_message(snippets: list[Snippet]) -> LLMMessage | None:
    """The system message a run's prompts carry the recalled memories in."""
    if not snippets:
        return None
    lines = "\n".join(f"- {' / '.join(s.content.splitlines())}" for s in snippets)
    return LLMMessage(role="system", content=f"{MEMORY_HEADER}\n{lines}")
