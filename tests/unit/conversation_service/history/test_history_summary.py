"""Sliding window with summary compression: what is summarised, when the cache is used or refreshed."""

from __future__ import annotations

import pytest

from conversation_service.history.extractor import SUMMARY_PREFIX, HistoryExtractor
from conversation_service.history.schemas import HistoryRecord
from conversation_service.history.summary_cache import InMemorySummaryCache
from conversation_service.settings.history import HistorySettings, HistoryStrategyName
from shared.protocol import Role
from tests.unit.conversation_service.history.history_fixtures import ScriptedSummaryLLM, conversation

SUMMARY = HistoryStrategyName.SUMMARY


def _numbers(text: str) -> list[int]:
    return [int(token[1:]) for token in text.split() if token.startswith("#") and token[1:].isdigit()]


def _extractor(
    llm: ScriptedSummaryLLM, cache: InMemorySummaryCache | None = None, **overrides
) -> HistoryExtractor:
    settings = HistorySettings(strategy=SUMMARY, summary_trigger=20, summary_window=10, **overrides)
    return HistoryExtractor(settings, llm=llm, summary_cache=cache or InMemorySummaryCache())


@pytest.mark.parametrize("size", [0, 1, 10])
async def test_short_conversations_go_verbatim_without_an_llm_call(size: int) -> None:
    llm = ScriptedSummaryLLM()
    records = conversation(size)
    result = await _extractor(llm).extract("c1", records)
    assert [m.content for m in result.messages] == [r.content for r in records]
    assert not result.stats.summary_used
    assert llm.calls == []


@pytest.mark.parametrize("size", [100, 1000])
async def test_long_conversations_get_one_summary_then_the_window(size: int) -> None:
    llm = ScriptedSummaryLLM()
    records = conversation(size)
    # Room for a summary that lists every message number it covered, so the test can check them.
    result = await _extractor(llm, token_budget=12_000, summary_max_tokens=6_000).extract("c1", records)

    first, *window = result.messages
    assert first.role is Role.SYSTEM and first.content.startswith(SUMMARY_PREFIX)
    assert [m.content for m in window] == [r.content for r in records[-10:]]
    stats = result.stats
    assert stats.summary_used and stats.summary_refreshed and stats.summary_error is None
    assert stats.included_messages == 10
    assert stats.tokens_used <= stats.token_budget
    # Every call saw the summarisation prompt (checked by the provider) and the summary reflects
    # the newest older messages, up to the one just before the window.
    assert _numbers(first.content)[-1] == size - 11
    if size == 100:
        assert len(llm.calls) == 1
        assert _numbers(first.content) == list(range(90))
        assert (stats.summarized_messages, stats.dropped_messages) == (90, 0)
    else:
        # A 990-message backlog needs more calls than one turn may make: the oldest part is left out.
        assert len(llm.calls) == 4
        assert stats.summarized_messages + stats.dropped_messages == 990
        assert 0 < stats.dropped_messages < 990
        assert _numbers(first.content) == list(range(stats.dropped_messages, 990))


async def test_cached_summary_is_reused_while_the_window_stays() -> None:
    llm = ScriptedSummaryLLM()
    extractor = _extractor(llm)
    records = conversation(60)
    first = await extractor.extract("c1", records)
    second = await extractor.extract("c1", records)
    assert len(llm.calls) == 1
    assert second.messages == first.messages
    assert second.stats.summary_used and not second.stats.summary_refreshed


async def test_moving_window_refreshes_the_summary_with_only_the_new_messages() -> None:
    llm = ScriptedSummaryLLM()
    extractor = _extractor(llm)
    records = conversation(62)
    await extractor.extract("c1", records[:60])
    result = await extractor.extract("c1", records)

    assert len(llm.calls) == 2
    prompt = llm.calls[1][1].content
    assert prompt.startswith("Summary of the conversation so far:\ncovered #0 ")
    # Only the two messages that left the window are sent, after the previous summary.
    assert _numbers(prompt.split("Messages that followed:")[1]) == [50, 51]
    assert result.stats.summary_refreshed
    assert result.stats.summarized_messages == 52
    assert [m.content for m in result.messages[1:]] == [r.content for r in records[-10:]]


async def test_summaries_are_kept_per_conversation() -> None:
    llm = ScriptedSummaryLLM()
    cache = InMemorySummaryCache()
    extractor = _extractor(llm, cache)
    await extractor.extract("a", conversation(40, seed=1))
    await extractor.extract("b", conversation(50, seed=2))
    assert len(llm.calls) == 2
    a, b = await cache.get("a"), await cache.get("b")
    assert a is not None and b is not None
    assert (a.last_covered_message_id, a.covered_message_count, _numbers(a.summary)) == (
        "m00029",
        30,
        list(range(30)),
    )
    assert (b.last_covered_message_id, b.covered_message_count, _numbers(b.summary)) == (
        "m00039",
        40,
        list(range(40)),
    )


async def test_refresh_step_keeps_new_messages_verbatim_until_it_is_exceeded() -> None:
    llm = ScriptedSummaryLLM()
    extractor = _extractor(llm, summary_refresh_step=4)
    records = conversation(70)
    await extractor.extract("c1", records[:60])
    within = await extractor.extract("c1", records[:64])
    assert len(llm.calls) == 1
    assert len(within.messages) == 1 + 14  # the summary up to #49, then #50..#63 verbatim
    assert _numbers(within.messages[1].content)[0] == 50
    assert within.stats.summarized_messages == 50 and within.stats.dropped_messages == 0

    beyond = await extractor.extract("c1", records[:66])
    assert len(llm.calls) == 2
    assert len(beyond.messages) == 1 + 10


async def test_a_summary_failure_still_sends_the_window() -> None:
    llm = ScriptedSummaryLLM(fail=True)
    result = await _extractor(llm).extract("c1", conversation(50))
    assert all(m.role is not Role.SYSTEM for m in result.messages)
    assert len(result.messages) == 10
    assert not result.stats.summary_used
    assert result.stats.summary_error is not None and "LLMStatusError" in result.stats.summary_error
    assert result.stats.dropped_messages == 40


async def test_an_empty_summary_counts_as_a_failure_and_is_not_cached() -> None:
    cache = InMemorySummaryCache()
    result = await _extractor(ScriptedSummaryLLM(reply="   "), cache).extract("c1", conversation(50))
    assert result.stats.summary_error == "summary was empty"
    assert await cache.get("c1") is None


async def test_a_runaway_summary_is_cut_to_its_token_ceiling() -> None:
    llm = ScriptedSummaryLLM(reply="very long summary " * 500)
    result = await _extractor(llm, summary_max_tokens=100).extract("c1", conversation(50))
    assert result.stats.summary_used
    assert result.stats.tokens_used <= result.stats.token_budget
    from shared.tokens import count_tokens

    assert count_tokens(result.messages[0].content[len(SUMMARY_PREFIX) :]) <= 100


async def test_few_but_large_messages_are_compressed_instead_of_dropped() -> None:
    llm = ScriptedSummaryLLM()
    records = conversation(12, min_words=400, max_words=400)  # ~5 k tokens in all: over the budget
    result = await _extractor(llm).extract("c1", records)
    assert result.stats.summary_used
    assert result.stats.summarized_messages + result.stats.included_messages == 12
    assert result.stats.tokens_used <= 4000


async def test_history_rewritten_under_the_cache_is_summarised_from_scratch() -> None:
    llm = ScriptedSummaryLLM()
    extractor = _extractor(llm)
    await extractor.extract("c1", conversation(40, seed=1))
    other = [
        HistoryRecord(id=f"x{i}", role=r.role, content=r.content)
        for i, r in enumerate(conversation(40, seed=3))
    ]
    await extractor.extract("c1", other)
    assert len(llm.calls) == 2
    assert llm.calls[1][1].content.startswith("Conversation:")


class BrokenCache(InMemorySummaryCache):
    def __init__(self) -> None:
        super().__init__()
        self.puts = 0

    async def get(self, conversation_id: str):
        raise ConnectionError("database unreachable")

    async def put(self, entry) -> None:
        self.puts += 1
        raise ConnectionError("database unreachable")


async def test_an_unreachable_cache_costs_an_llm_call_not_the_turn(caplog: pytest.LogCaptureFixture) -> None:
    llm = ScriptedSummaryLLM()
    cache = BrokenCache()
    records = conversation(40)
    result = await _extractor(llm, cache).extract("c1", records)
    assert result.stats.summary_used and result.stats.summary_error is None
    assert len(llm.calls) == 1 and cache.puts == 1
    assert {"history summary cache unreadable", "history summary not cached"} <= {
        r.getMessage() for r in caplog.records
    }
    # Message text never reaches the logs, only ids and error types.
    assert all(records[-1].content not in r.getMessage() for r in caplog.records)
