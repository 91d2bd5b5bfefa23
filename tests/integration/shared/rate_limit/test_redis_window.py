"""The Redis window: the same budget seen by two clients (two replicas), all-or-nothing, timed by Redis."""

from __future__ import annotations

import asyncio
import uuid

from shared.rate_limit.config import Dimension
from shared.rate_limit.window import Charge, RedisWindow

REQUEST = Charge(Dimension.REQUESTS, 2, 1, 1)


async def test_two_clients_share_one_budget_and_wait_for_the_oldest_call(redis_url: str) -> None:
    prefix = f"test-rl-{uuid.uuid4().hex}"
    first, second = RedisWindow(redis_url, prefix), RedisWindow(redis_url, prefix)
    try:
        results = await asyncio.gather(*(w.reserve("acme", [REQUEST], 0.5) for w in (first, second, first, second)))
        assert sum(r is None for r in results) == 2, "two of four concurrent calls fit a budget of two"
        short = next(r for r in results if r is not None)
        assert short.dimension is Dimension.REQUESTS and 0 < short.wait_s <= 0.5
        assert await second.reserve("globex", [REQUEST], 0.5) is None, "another key is not slowed"
        await asyncio.sleep(short.wait_s)  # the window's own answer: room frees then
        assert await second.reserve("acme", [REQUEST], 0.5) is None
    finally:
        await first.aclose()
        await second.aclose()


async def test_all_or_nothing_and_output_tokens_recorded_later(redis_url: str) -> None:
    window = RedisWindow(redis_url, f"test-rl-{uuid.uuid4().hex}")
    try:
        tokens = Charge(Dimension.INPUT_TOKENS, 100, 80, 80)
        assert await window.reserve("k", [REQUEST, tokens], 60) is None
        short = await window.reserve("k", [REQUEST, tokens], 60)
        assert short is not None and short.dimension is Dimension.INPUT_TOKENS and 59 < short.wait_s <= 60
        assert await window.reserve("k", [REQUEST, Charge(Dimension.INPUT_TOKENS, 100, 20, 20)], 60) is None
        assert await window.reserve("k", [REQUEST], 60) is not None, "both requests are taken now"

        output = Charge(Dimension.OUTPUT_TOKENS, 50, 1, 0)
        assert await window.reserve("o", [output], 60) is None
        await window.record("o", Dimension.OUTPUT_TOKENS, 50, 60)
        blocked = await window.reserve("o", [output], 60)
        assert blocked is not None and blocked.dimension is Dimension.OUTPUT_TOKENS
    finally:
        await window.aclose()
