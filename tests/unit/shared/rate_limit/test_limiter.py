"""The limiter waits for room (saying why and how long), or gives up with when to retry."""

from __future__ import annotations

import time

import pytest

from shared.rate_limit.config import Dimension, Limits, OrganisationLimits, RateLimitConfig
from shared.rate_limit.limiter import RateLimited, RateLimiter, Wait, budget_key
from shared.rate_limit.window import MemoryWindow


def _limiter(max_wait_s: float = 5.0, **limits) -> RateLimiter:
    config = RateLimitConfig(Limits(), {"acme": OrganisationLimits(**limits)})
    return RateLimiter(config, MemoryWindow(), max_wait_s=max_wait_s)


async def _no_tokens() -> int:
    raise AssertionError("input tokens are counted only when they are limited")


async def test_over_the_limit_a_call_waits_for_the_window_and_says_why() -> None:
    limiter = _limiter(requests=2, window_s=0.3)
    waits: list[Wait] = []

    async def on_wait(wait: Wait) -> None:
        waits.append(wait)

    started = time.monotonic()
    for _ in range(3):
        await limiter.acquire("acme", "m", _no_tokens, on_wait)
    assert time.monotonic() - started >= 0.25
    assert len(waits) == 1 and waits[0].dimension is Dimension.REQUESTS
    assert 0 < waits[0].wait_s <= 0.3
    assert waits[0].reason == "rate limit of 2 requests per 0.3 s reached for organisation acme on model m"


async def test_other_organisations_and_models_are_not_slowed() -> None:
    limiter = _limiter(requests=1, window_s=60)

    async def on_wait(wait: Wait) -> None:
        raise AssertionError(f"waited: {wait}")

    await limiter.acquire("acme", "m", _no_tokens, on_wait)
    await limiter.acquire("acme", "other-model", _no_tokens, on_wait)
    await limiter.acquire("globex", "m", _no_tokens, on_wait)


async def test_a_wait_longer_than_the_maximum_fails_at_once_with_when_to_retry() -> None:
    limiter = _limiter(max_wait_s=1, requests=1, window_s=60)

    async def on_wait(wait: Wait) -> None:
        raise AssertionError("no wait beyond the maximum")

    await limiter.acquire("acme", "m", _no_tokens, on_wait)
    with pytest.raises(RateLimited) as raised:
        await limiter.acquire("acme", "m", _no_tokens, on_wait)
    assert 59 < raised.value.retry_after_s <= 60
    assert "retry in 60 s" in str(raised.value)


async def test_input_and_output_tokens() -> None:
    limiter = _limiter(max_wait_s=0, input_tokens=100, output_tokens=10, window_s=60)

    async def seventy() -> int:
        return 70

    async def on_wait(wait: Wait) -> None:
        return None

    await limiter.acquire("acme", "m", seventy, on_wait)
    with pytest.raises(RateLimited, match="100 input tokens"):
        await limiter.acquire("acme", "m", seventy, on_wait)
    await limiter.record_output("acme", "m", 10)

    async def ten() -> int:
        return 10

    with pytest.raises(RateLimited, match="10 output tokens"):
        await limiter.acquire("acme", "m", ten, on_wait)


def test_budget_keys_do_not_collide() -> None:
    assert budget_key("a:b", "c") != budget_key("a", "b:c")
