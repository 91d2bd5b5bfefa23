"""The HistoryExtractor: a conversation's past messages turned into the agent's ``chat_history``.

Input: the conversation's stored messages, oldest first, without the message being sent now (that
one travels as the request's ``message``). Output: ``ChatMessage``s plus stats that say how full
the token budget is, so the caller can warn the user before the context overflows.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from prometheus_client import CollectorRegistry, Counter, Histogram

from conversation_service.history.context import map_role
from conversation_service.history.schemas import HistoryRecord, HistoryResult, HistoryStats
from conversation_service.history.strategies import Window, clip_content, fit_newest
from conversation_service.history.summarizer import Summarizer, SummaryError, plan_chunks
from conversation_service.history.summary_cache import CachedSummary, InMemorySummaryCache, SummaryCache
from conversation_service.history.tokens import HistoryItem, TokenCounter
from conversation_service.settings.history import HistorySettings, HistoryStrategyName
from shared.keyed_lock import KeyedLock
from shared.llm.base import LLMProvider
from shared.protocol import ChatMessage, Role, utcnow
from shared.tokens import TOKENS_PER_MESSAGE

logger = logging.getLogger(__name__)

SUMMARY_PREFIX = "Summary of the earlier conversation:\n"
# Largest history a request may carry (shared.protocol.MAX_HISTORY_MESSAGES), less the summary.
_MAX_VERBATIM = 999
# The fewest tokens a message the window takes can cost: framing, its role and one token of text.
_MIN_MESSAGE_TOKENS = TOKENS_PER_MESSAGE + 2
# Stored messages read beyond what the window can take, for the few it skips (blank ones).
_SKIP_ALLOWANCE = 8


class HistoryExtractor:
    def __init__(
        self,
        settings: HistorySettings,
        *,
        llm: LLMProvider | None = None,
        summary_cache: SummaryCache | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        if settings.strategy is HistoryStrategyName.SUMMARY and llm is None:
            raise ValueError("HISTORY_STRATEGY=summary needs an LLM provider to write the summaries")
        self.settings = settings
        self._counter = TokenCounter(settings)
        self._cache: SummaryCache = summary_cache if summary_cache is not None else InMemorySummaryCache()
        self._summarizer = Summarizer(llm, settings) if llm is not None else None
        # One refresh per conversation at a time in this process: concurrent turns reuse its result
        # instead of paying for the same LLM call twice.
        self._locks = KeyedLock()
        self._fill = self._near_limit = None
        if registry is not None:
            self._fill = Histogram(
                "conversation_history_budget_fill_ratio",
                "Share of the history token budget used per agent request",
                ["strategy"],
                buckets=(0.1, 0.25, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0),
                registry=registry,
            )
            self._near_limit = Counter(
                "conversation_history_near_limit",
                "Agent requests whose history used more than HISTORY_WARN_RATIO of the budget",
                ["strategy"],
                registry=registry,
            )

    def usable_needed(self) -> int | None:
        """The most usable messages (the newest) the window can take; None: every one, as the
        summary strategy folds what leaves the window into its summary."""
        s = self.settings
        if s.strategy is HistoryStrategyName.SUMMARY:
            return None
        if s.strategy is HistoryStrategyName.LAST_N:
            return s.max_messages
        return min(_MAX_VERBATIM, s.token_budget // _MIN_MESSAGE_TOKENS)

    def rows_to_read(self) -> int:
        """Stored messages a turn reads, newest first: what the window can take and a few it may
        skip, not the whole conversation (a turn's cost must not grow with the conversation's
        length); at most ``HISTORY_MAX_INPUT_MESSAGES``."""
        needed = self.usable_needed()
        limit = self.settings.max_input_messages
        return limit if needed is None else min(limit, needed + _SKIP_ALLOWANCE)

    def read_enough(self, records: Sequence[HistoryRecord]) -> bool:
        """Whether ``records``, the newest ``rows_to_read``, hold every message the window can take
        (False: so many were skipped that older ones must be read too)."""
        needed = self.usable_needed()
        return needed is None or sum(1 for record in records if _usable(record)) >= needed

    async def extract(
        self,
        conversation_id: str,
        records: Sequence[HistoryRecord],
        *,
        strategy: HistoryStrategyName | None = None,
    ) -> HistoryResult:
        strategy = strategy or self.settings.strategy
        items: list[HistoryItem] = []
        skipped = 0
        overflow = max(0, len(records) - self.settings.max_input_messages)
        for record in records[overflow:]:
            role = _usable(record)
            if role is None:
                skipped += 1
                continue
            items.append(clip_content(HistoryItem(str(record.id), role, record.content)))

        if strategy is HistoryStrategyName.SUMMARY:
            if self._summarizer is None:
                raise ValueError("the summary strategy needs an LLM provider")
            result = await self._with_summary(conversation_id, items, skipped)
        else:
            max_count = (
                self.settings.max_messages if strategy is HistoryStrategyName.LAST_N else _MAX_VERBATIM
            )
            window = await fit_newest(items, self._counter, self.settings.token_budget, max_count)
            result = self._result(strategy, items, window, skipped)
        if overflow:
            stats = replace(
                result.stats,
                total_messages=result.stats.total_messages + overflow,
                dropped_messages=result.stats.dropped_messages + overflow,
            )
            result = replace(result, stats=stats)
        self._observe(result.stats)
        return result

    # --- summary compression ----------------------------------------------------------------

    async def _with_summary(
        self, conversation_id: str, items: list[HistoryItem], skipped: int
    ) -> HistoryResult:
        s = self.settings
        budget = s.token_budget
        if s.summary_max_tokens >= budget:
            raise ValueError("HISTORY_SUMMARY_MAX_TOKENS must be smaller than HISTORY_TOKEN_BUDGET")
        if len(items) <= s.summary_trigger:
            whole = await fit_newest(items, self._counter, budget, len(items), truncate_newest=False)
            if len(whole.items) == len(items):
                return self._result(HistoryStrategyName.SUMMARY, items, whole, skipped)
        async with self._locks(conversation_id):
            return await self._compress(conversation_id, items, skipped)

    async def _cache_get(self, conversation_id: str) -> CachedSummary | None:
        # The cache saves LLM calls; when it cannot be read, summarise afresh rather than fail the turn.
        try:
            return await self._cache.get(conversation_id)
        except Exception as exc:  # noqa: BLE001 - any cache failure degrades to no cache
            logger.warning(
                "history summary cache unreadable",
                extra={"conversation_id": conversation_id, "reason": type(exc).__name__},
            )
            return None

    async def _compress(self, conversation_id: str, items: list[HistoryItem], skipped: int) -> HistoryResult:
        s = self.settings
        cached = await self._cache_get(conversation_id)
        index_of = {item.id: i for i, item in enumerate(items)}
        covered = index_of.get(cached.last_covered_message_id) if cached is not None else None
        if cached is not None and covered is not None and s.summary_refresh_step > 0:
            kept = await self._between_refreshes(items, skipped, cached, covered)
            if kept is not None:
                return kept

        # The verbatim window leaves room for the largest summary we accept.
        reserve = self._counter.count_text(Role.SYSTEM, SUMMARY_PREFIX) + s.summary_max_tokens
        window = await fit_newest(items, self._counter, s.token_budget - reserve, s.summary_window)
        older = items[: len(items) - len(window.items)]
        if not older:
            return self._result(HistoryStrategyName.SUMMARY, items, window, skipped)
        if cached is None or covered is None or covered >= len(older):
            return await self._refresh(conversation_id, items, window, skipped, older, None)
        if covered == len(older) - 1:  # the cached summary covers exactly what left the window
            return self._result(
                HistoryStrategyName.SUMMARY, items, window, skipped, summary=cached.summary,
                summary_tokens=await self._counter.count_one(Role.SYSTEM, SUMMARY_PREFIX + cached.summary),
                summarized=min(cached.covered_message_count, len(older)),
            )
        return await self._refresh(conversation_id, items, window, skipped, older, (cached, covered))

    async def _between_refreshes(
        self, items: list[HistoryItem], skipped: int, cached: CachedSummary, covered: int
    ) -> HistoryResult | None:
        """The cached summary and every message after it verbatim, while they still fit: between
        refreshes, messages past the summary pile up to ``summary_refresh_step`` beyond the window."""
        tail = items[covered + 1 :]
        if not 0 < len(tail) <= self.settings.summary_window + self.settings.summary_refresh_step:
            return None
        summary_cost = await self._counter.count_one(Role.SYSTEM, SUMMARY_PREFIX + cached.summary)
        window = await fit_newest(
            tail, self._counter, self.settings.token_budget - summary_cost, len(tail), truncate_newest=False
        )
        if len(window.items) != len(tail):
            return None
        return self._result(
            HistoryStrategyName.SUMMARY, items, window, skipped, summary=cached.summary, summary_tokens=summary_cost,
            summarized=min(cached.covered_message_count, covered + 1),
        )

    async def _refresh(
        self, conversation_id: str, items: list[HistoryItem], window: Window, skipped: int,
        older: list[HistoryItem], cached: tuple[CachedSummary, int] | None,
    ) -> HistoryResult:
        """Summarise what left the window: all of ``older``, or only what the cached summary (up to
        its covered index) does not cover yet, folded into it."""
        s = self.settings
        previous, previous_count, pending = None, 0, older
        if cached is not None:
            previous, previous_count, pending = cached[0].summary, cached[0].covered_message_count, older[cached[1] + 1 :]
        chunks = plan_chunks(pending, await self._counter.counts(pending), s.summary_chunk_tokens)
        # Too long a backlog for one turn: summarise its newest part, leave the oldest out.
        omitted = sum(len(c) for c in chunks[: max(0, len(chunks) - s.summary_max_calls)])
        chunks = chunks[max(0, len(chunks) - s.summary_max_calls) :]
        summary = previous
        assert self._summarizer is not None
        try:
            for chunk in chunks:
                summary = await self._summarizer.fold(summary, [pending[i] for i in chunk])
        except SummaryError as exc:
            logger.warning("history summary skipped", extra={
                "conversation_id": conversation_id, "reason": str(exc), "pending_messages": len(pending)})
            return self._result(HistoryStrategyName.SUMMARY, items, window, skipped, summary_error=str(exc))
        assert summary is not None
        covered_count = min(previous_count + len(pending) - omitted, len(older))
        summary_tokens = await self._counter.count_one(Role.SYSTEM, SUMMARY_PREFIX + summary)
        entry = CachedSummary(
            conversation_id=conversation_id, summary=summary, last_covered_message_id=older[-1].id,
            covered_message_count=covered_count, token_count=summary_tokens, updated_at=utcnow(),
        )
        try:
            await self._cache.put(entry)
        except Exception as exc:  # noqa: BLE001 - the summary is still good for this turn
            logger.warning(
                "history summary not cached", extra={"conversation_id": conversation_id, "reason": type(exc).__name__}
            )
        return self._result(
            HistoryStrategyName.SUMMARY, items, window, skipped, summary=summary, summary_tokens=summary_tokens,
            summarized=covered_count, refreshed=True,
        )

    # --- result ------------------------------------------------------------------------------

    def _result(
        self,
        strategy: HistoryStrategyName,
        items: list[HistoryItem],
        window: Window,
        skipped: int,
        *,
        summary: str | None = None,
        summary_tokens: int = 0,
        summarized: int = 0,
        refreshed: bool = False,
        summary_error: str | None = None,
    ) -> HistoryResult:
        messages = [ChatMessage(role=item.role, content=item.content) for item in window.items]
        if summary is not None:
            messages.insert(0, ChatMessage(role=Role.SYSTEM, content=SUMMARY_PREFIX + summary))
        tokens = window.tokens + summary_tokens
        budget = self.settings.token_budget
        stats = HistoryStats(
            strategy=strategy.value,
            total_messages=len(items),
            included_messages=len(window.items),
            dropped_messages=max(0, len(items) - len(window.items) - summarized),
            truncated_messages=window.truncated,
            summarized_messages=summarized,
            tokens_used=tokens,
            token_budget=budget,
            near_limit=tokens >= self.settings.warn_ratio * budget,
            summary_used=summary is not None,
            summary_refreshed=refreshed,
            summary_error=summary_error,
            skipped_roles=skipped,
        )
        return HistoryResult(messages=messages, stats=stats)

    def _observe(self, stats: HistoryStats) -> None:
        if self._fill is not None:
            self._fill.labels(stats.strategy).observe(stats.fill_ratio)
        if self._near_limit is not None and stats.near_limit:
            self._near_limit.labels(stats.strategy).inc()


def _usable(record: HistoryRecord) -> Role | None:
    """The agent role of a record the window may take. Unknown roles and empty messages (a reply
    that failed before its first token) carry nothing the agent can use."""
    role = map_role(record.role)
    return role if role is not None and record.content and record.content.strip() else None
