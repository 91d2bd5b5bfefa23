"""HistoryExtractor windowing: last N, token budget, oversized messages, stats, role mapping."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest
from prometheus_client import CollectorRegistry

from conversation_service.history.extractor import HistoryExtractor
from conversation_service.history.schemas import HistoryRecord
from conversation_service.history.strategies import TRUNCATION_MARKER
from conversation_service.settings.history import HistorySettings, HistoryStrategyName
from shared.protocol import ChatMessage, Role
from shared.tokens import count_message_tokens, count_tokens
from tests.unit.conversation_service.history.history_fixtures import conversation

SIZES = [0, 1, 10, 100, 1000]


def _cost(messages: list[ChatMessage]) -> int:
    return sum(count_message_tokens(m.role.value, m.content) for m in messages)


def _is_tail(messages: list[ChatMessage], records: list[HistoryRecord]) -> bool:
    tail = records[len(records) - len(messages) :] if messages else []
    return [(m.role.value, m.content) for m in messages] == [(r.role, r.content) for r in tail]


@pytest.mark.parametrize("size", SIZES)
async def test_last_n_keeps_the_newest_ten(size: int) -> None:
    records = conversation(size)
    result = await HistoryExtractor(HistorySettings()).extract("c1", records)

    expected = min(size, 10)
    assert len(result.messages) == expected
    assert _is_tail(result.messages, records)
    assert result.stats.strategy == "last_n"
    assert result.stats.total_messages == size
    assert result.stats.included_messages == expected
    assert result.stats.dropped_messages == size - expected
    assert result.stats.truncated_messages == 0
    assert result.stats.tokens_used == _cost(result.messages)
    assert result.stats.token_budget == 4000


async def test_last_n_is_configurable_and_still_bounded_by_the_budget() -> None:
    records = conversation(50, min_words=150, max_words=150)  # ~150+ tokens each
    settings = HistorySettings(max_messages=40, token_budget=1000)
    result = await HistoryExtractor(settings).extract("c1", records)

    assert 0 < len(result.messages) < 40
    assert _is_tail(result.messages, records)
    assert result.stats.tokens_used <= 1000
    # The next older message would not have fitted: the budget, not the count, cut the window.
    older = records[len(records) - len(result.messages) - 1]
    assert result.stats.tokens_used + count_message_tokens(older.role, older.content) > 1000


@pytest.mark.parametrize("size", SIZES)
async def test_token_budget_takes_as_many_newest_messages_as_fit(size: int) -> None:
    records = conversation(size)
    settings = HistorySettings(strategy=HistoryStrategyName.TOKEN_BUDGET)
    result = await HistoryExtractor(settings).extract("c1", records)

    assert _is_tail(result.messages, records)
    assert result.stats.tokens_used == _cost(result.messages) <= 4000
    if len(result.messages) < size:
        older = records[size - len(result.messages) - 1]
        assert result.stats.tokens_used + count_message_tokens(older.role, older.content) > 4000
    else:
        assert result.stats.dropped_messages == 0
    if size == 1000:
        # ~4000 tokens of ~25-token messages: far more than 10, far fewer than all.
        assert 50 < len(result.messages) < 1000
        assert result.stats.near_limit
        assert result.stats.fill_ratio > 0.95


async def test_strategy_can_be_chosen_per_call() -> None:
    records = conversation(100)
    extractor = HistoryExtractor(HistorySettings())
    by_count = await extractor.extract("c1", records)
    by_budget = await extractor.extract("c1", records, strategy=HistoryStrategyName.TOKEN_BUDGET)
    assert len(by_count.messages) == 10
    assert len(by_budget.messages) > 10


@pytest.mark.parametrize("strategy", [HistoryStrategyName.LAST_N, HistoryStrategyName.TOKEN_BUDGET])
async def test_newest_message_larger_than_the_budget_is_truncated_visibly(
    strategy: HistoryStrategyName,
) -> None:
    huge = "word " * 20_000  # ~20k tokens
    records = conversation(5) + [HistoryRecord(id="big", role="assistant", content=huge)]
    result = await HistoryExtractor(HistorySettings(strategy=strategy, token_budget=500)).extract(
        "c1", records
    )

    assert len(result.messages) == 1
    only = result.messages[0]
    assert only.role is Role.ASSISTANT
    assert huge.startswith(only.content.split("\n[message truncated")[0])
    assert "[message truncated to fit the history budget:" in only.content
    assert f" of {count_tokens(huge)} tokens kept]" in only.content
    assert result.stats.truncated_messages == 1
    assert result.stats.tokens_used == count_message_tokens("assistant", only.content) <= 500
    assert result.stats.dropped_messages == 5


async def test_an_older_oversized_message_ends_the_window_instead_of_being_cut() -> None:
    records = (
        conversation(3)
        + [HistoryRecord(id="big", role="user", content="word " * 10_000)]
        + conversation(4, seed=9)
    )
    records = [HistoryRecord(id=f"r{i}", role=r.role, content=r.content) for i, r in enumerate(records)]
    result = await HistoryExtractor(HistorySettings(token_budget=1000)).extract("c1", records)

    assert [m.content for m in result.messages] == [r.content for r in records[-4:]]
    assert result.stats.truncated_messages == 0
    assert result.stats.dropped_messages == 4
    assert all(TRUNCATION_MARKER[:20] not in m.content for m in result.messages)


async def test_roles_are_mapped_and_unknown_or_empty_messages_dropped() -> None:
    records = [
        HistoryRecord(id="1", role="user", content="hi"),
        HistoryRecord(id="2", role="agent", content="hello from the agent"),
        HistoryRecord(id="3", role="tool", content="raw tool output"),
        HistoryRecord(id="4", role="SYSTEM", content="be brief"),
        HistoryRecord(id="5", role="assistant", content="   "),
        HistoryRecord(id="6", role="notice", content="Advanced features temporarily unavailable"),
        HistoryRecord(id="7", role="Human", content="and now?"),
    ]
    result = await HistoryExtractor(HistorySettings()).extract("c1", records)
    assert [(m.role, m.content) for m in result.messages] == [
        (Role.USER, "hi"),
        (Role.ASSISTANT, "hello from the agent"),
        (Role.SYSTEM, "be brief"),
        (Role.USER, "and now?"),
    ]
    assert result.stats.skipped_roles == 3
    assert result.stats.total_messages == 4


async def test_stats_flag_a_nearly_full_budget_and_feed_the_metrics() -> None:
    registry = CollectorRegistry()
    records = conversation(30, min_words=30, max_words=30)
    settings = HistorySettings(strategy=HistoryStrategyName.TOKEN_BUDGET, token_budget=600, warn_ratio=0.8)
    extractor = HistoryExtractor(settings, registry=registry)
    full = await extractor.extract("c1", records)
    light = await extractor.extract("c2", records[:2])

    assert full.stats.near_limit and full.stats.fill_ratio >= 0.8
    assert not light.stats.near_limit and light.stats.fill_ratio < 0.8
    assert full.stats.as_dict()["fill_ratio"] == round(full.stats.tokens_used / 600, 4)
    assert (
        registry.get_sample_value("conversation_history_near_limit_total", {"strategy": "token_budget"}) == 1
    )
    assert (
        registry.get_sample_value(
            "conversation_history_budget_fill_ratio_count", {"strategy": "token_budget"}
        )
        == 2
    )


def count_tokenizations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per message the extractor's token counter actually tokenizes (not from its cache)."""
    import conversation_service.history.tokens as token_module

    tokenized: list[int] = []
    real = token_module.count_message_tokens

    def counting(role: str, content: str, encoding: str = "cl100k_base") -> int:
        tokenized.append(1)
        return real(role, content, encoding)

    monkeypatch.setattr(token_module, "count_message_tokens", counting)
    return tokenized


async def test_counting_a_thousand_long_messages_does_not_block_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tokenized = count_tokenizations(monkeypatch)
    # ~600 k characters: tokenizing them in one go takes tens of milliseconds of CPU.
    records = conversation(1000, min_words=80, max_words=160)
    settings = HistorySettings(strategy=HistoryStrategyName.TOKEN_BUDGET, token_budget=1_000_000)
    extractor = HistoryExtractor(settings)
    gaps: list[float] = []
    done = asyncio.Event()

    async def heartbeat() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    # Objects left by earlier tests are moved out of the collector's sight: a full collection of
    # the whole test session's heap would pause the loop for reasons unrelated to tokenizing.
    gc.collect()
    gc.freeze()
    try:
        beat = asyncio.create_task(heartbeat())
        started = time.perf_counter()
        result = await extractor.extract("c1", records)
        elapsed = time.perf_counter() - started
        done.set()
        await beat
    finally:
        gc.unfreeze()

    assert result.stats.included_messages == 999  # the wire contract's cap, less room for a summary
    assert len(tokenized) == 999  # counted newest first, up to the cap
    # The loop kept turning while the tokenizer ran: no stall anywhere near the total work time.
    assert len(gaps) > 10
    assert max(gaps) < max(0.02, elapsed / 2)

    # Counts are cached per message: the next turn does not tokenize the history again.
    tokenized.clear()
    again = await extractor.extract("c1", records)
    assert tokenized == []
    assert again.stats == result.stats


async def test_an_edited_message_is_counted_again() -> None:
    extractor = HistoryExtractor(HistorySettings(strategy=HistoryStrategyName.TOKEN_BUDGET))
    first = await extractor.extract("c1", [HistoryRecord(id="1", role="user", content="short")])
    edited = await extractor.extract("c1", [HistoryRecord(id="1", role="user", content="short " * 50)])
    assert edited.stats.tokens_used == count_message_tokens("user", "short " * 50) > first.stats.tokens_used


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HISTORY_STRATEGY", "summary")
    monkeypatch.setenv("HISTORY_MAX_MESSAGES", "25")
    monkeypatch.setenv("HISTORY_TOKEN_BUDGET", "8000")
    monkeypatch.setenv("HISTORY_SUMMARY_TRIGGER", "40")
    monkeypatch.setenv("HISTORY_SUMMARY_WINDOW", "12")
    monkeypatch.setenv("HISTORY_WARN_RATIO", "0.9")
    settings = HistorySettings()
    assert settings.strategy is HistoryStrategyName.SUMMARY
    assert (settings.max_messages, settings.token_budget, settings.summary_trigger) == (25, 8000, 40)
    assert (settings.summary_window, settings.warn_ratio) == (12, 0.9)


@pytest.mark.parametrize(
    "env",
    [
        {"HISTORY_MAX_MESSAGES": "0"},
        {"HISTORY_TOKEN_BUDGET": "-1"},
        {"HISTORY_STRATEGY": "everything"},
        {"HISTORY_STRATEGY": "summary", "HISTORY_TOKEN_BUDGET": "500", "HISTORY_SUMMARY_MAX_TOKENS": "500"},
    ],
)
def test_invalid_settings_are_refused(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValueError):
        HistorySettings()


def test_summary_strategy_needs_a_provider() -> None:
    with pytest.raises(ValueError, match="LLM provider"):
        HistoryExtractor(HistorySettings(strategy=HistoryStrategyName.SUMMARY))


async def test_only_the_newest_input_messages_are_looked_at() -> None:
    records = conversation(50)
    settings = HistorySettings(strategy=HistoryStrategyName.TOKEN_BUDGET, max_input_messages=20)
    result = await HistoryExtractor(settings).extract("c1", records)
    assert [m.content for m in result.messages] == [r.content for r in records[-20:]]
    assert (result.stats.total_messages, result.stats.dropped_messages) == (50, 30)


def test_records_are_built_from_stored_messages() -> None:
    from conversation_service.db.models import Message

    stored = Message(id="m1", conversation_id="c1", role="assistant", content=None, created_at=None)
    record = HistoryRecord.from_message(stored)
    assert (record.id, record.role, record.content, record.created_at) == ("m1", "assistant", "", None)


async def test_token_counts_of_left_conversations_do_not_pile_up(monkeypatch: pytest.MonkeyPatch) -> None:
    tokenized = count_tokenizations(monkeypatch)
    extractor = HistoryExtractor(HistorySettings(token_cache_size=100))
    counter = extractor._counter
    # Conversations of 12 messages each, every one left for a new one, as a chat client does.
    for n in range(200):
        records = [HistoryRecord(id=f"c{n}-{r.id}", role=r.role, content=r.content, created_at=r.created_at)
                   for r in conversation(12, seed=n)]
        await extractor.extract(f"c{n}", records)
        assert len(counter) <= 100
    assert len(counter) == 100
    # The conversation in use is still counted once: its next turn tokenizes nothing again.
    tokenized.clear()
    await extractor.extract("c199", records)
    assert tokenized == []


@pytest.mark.parametrize(("strategy", "overrides"), [
    (HistoryStrategyName.LAST_N, {}),
    (HistoryStrategyName.LAST_N, {"max_messages": 3}),
    (HistoryStrategyName.TOKEN_BUDGET, {}),
    (HistoryStrategyName.TOKEN_BUDGET, {"token_budget": 200}),
])
async def test_the_newest_rows_to_read_give_the_window_the_whole_conversation_gives(
    strategy: HistoryStrategyName, overrides: dict,
) -> None:
    # What a turn reads of a long conversation (AgentDelegation._read_history) loses nothing the
    # window takes: the window is a tail, and no more messages fit than rows_to_read allows for.
    records = conversation(3000)
    extractor = HistoryExtractor(HistorySettings(strategy=strategy, **overrides))
    limit = extractor.rows_to_read()
    assert limit < 1000
    newest = records[-limit:]
    assert extractor.read_enough(newest)
    whole, read = await extractor.extract("c1", records), await extractor.extract("c2", newest)
    assert read.messages == whole.messages and len(read.messages) > 0


def test_what_the_summary_strategy_reads_and_when_a_read_is_short() -> None:
    summary = HistoryExtractor(HistorySettings(strategy=HistoryStrategyName.SUMMARY, max_input_messages=500),
                               llm=object())  # never called here
    assert summary.usable_needed() is None and summary.rows_to_read() == 500
    last_n = HistoryExtractor(HistorySettings(max_messages=4))
    assert last_n.rows_to_read() == 12
    blank = [HistoryRecord(id=str(i), role="user", content=" ") for i in range(9)]
    said = [HistoryRecord(id=f"s{i}", role="user", content="hello") for i in range(3)]
    assert not last_n.read_enough(said + blank)  # three usable of twelve: older ones are needed
    assert last_n.read_enough(said + said[:1] + blank)
