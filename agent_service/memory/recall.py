"""``LongTermMemory``: what a run recalls before its model calls, and what a completed turn leaves.

A recall asks the store for candidates by relevance, scores each ``0.7 × relevance + 0.3 × recency``
(relevance scaled to the best candidate's, recency halving every ``recency_half_life_s``), keeps the
top k the health state allows and clips them to a token budget. A completed run's turn is remembered
after its terminal event, through a bounded queue (``writer.RememberQueue``).

Every store call is bounded in time and never cancelled half-way (``shared.cancel_safety``): past
its budget the caller goes on without it while the call ends in the background and gives its
connection back; a store so slow that ``LATE_CALLS`` of them are still running is not asked at all.
A failure, a timeout or a refusal only degrades the memory's health (and is counted): the run goes on
with its history alone.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import datetime

from prometheus_client import Counter

from agent_service.memory.health import MemoryHealth, MemoryHealthState
from agent_service.memory.store import Candidate, MemoryStore, Owner
from agent_service.memory.writer import RememberQueue, Turn
from shared.cancel_safety import RunToEnd
from shared.llm.base import LLMMessage
from shared.protocol import utcnow
from shared.tokens import count_tokens

log = logging.getLogger(__name__)

RELEVANCE_WEIGHT = 0.7
RECENCY_WEIGHT = 0.3
# Candidates fetched per memory kept: the salience ranking picks among them.
CANDIDATES_PER_SLOT = 3
MEMORY_HEADER = "What the user told you in earlier conversations (most relevant first):"
# Store calls of one kind that may still be running after their caller gave up on them.
LATE_CALLS = 16


@dataclass(frozen=True, slots=True)
class Snippet:
    content: str
    salience: float


class LongTermMemory:
    def __init__(
        self, store: MemoryStore, health: MemoryHealth, failures: Counter, dropped: Counter, *, token_budget: int,
        recency_half_life_s: float, timeout_s: float, write_queue_size: int = 1000,
    ) -> None:
        self.store = store
        self.health = health
        self._failures = failures
        self.token_budget = token_budget
        self.recency_half_life_s = recency_half_life_s
        self.timeout_s = timeout_s
        self._recalls = RunToEnd("memory recall", limit=LATE_CALLS)
        self._writes = RunToEnd("memory remember", limit=LATE_CALLS)
        self._queue = RememberQueue(self._remember, size=write_queue_size, dropped=dropped)

    def start(self) -> None:
        self._queue.start()

    async def written(self) -> None:
        """Return once every turn offered so far is written (or given up on)."""
        await self._queue.idle()

    async def aclose(self, drain_s: float) -> None:
        """Write the queued turns within ``drain_s``, then let late store calls end (or cancel them)."""
        await self._queue.aclose(drain_s)
        for calls in (self._writes, self._recalls):
            await calls.aclose(drain_s)

    async def recall(self, owner: Owner, query: str) -> list[Snippet]:
        k = self.health.top_k()
        if k == 0 or not query.strip():
            return []
        try:
            candidates = await self._recalls.call(self.store.recall(owner, query, k * CANDIDATES_PER_SLOT), self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - the store's failure is the memory's, never the run's
            self._failed("recall", exc)
            return []
        self.health.succeeded()
        return self._clip(salience_ranked(candidates, utcnow(), self.recency_half_life_s)[:k])

    def remember_later(self, owner: Owner, user_message: str, answer: str, session_id: str | None) -> None:
        """A completed run's turn, written in the background (its terminal event is written already)."""
        if self.health.state() is MemoryHealthState.DOWN or not user_message.strip():
            return
        self._queue.offer(Turn(owner, user_message, answer, session_id))

    async def remember(self, owner: Owner, user_message: str, answer: str, session_id: str | None) -> None:
        """Write a turn now, within the time budget."""
        await self._remember(Turn(owner, user_message, answer, session_id))

    async def _remember(self, turn: Turn) -> None:
        if self.health.state() is MemoryHealthState.DOWN or not turn.user_message.strip():
            return
        content = f"User: {turn.user_message.strip()}\nAssistant: {turn.answer.strip()}"
        try:
            await self._writes.call(self.store.remember(turn.owner, content, turn.session_id, utcnow()), self.timeout_s)
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
