"""One suite for every sliding window (in-process and Redis): what they promise is the same. For
Redis, two clients stand for two replicas sharing one budget."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlsplit

import pytest

from shared.rate_limit.config import Dimension
from shared.rate_limit.redis_window import RedisWindow
from shared.rate_limit.window import Charge, MemoryWindow, Window
from tests.support.dependencies import TcpRelay

REQUEST = Charge(Dimension.REQUESTS, 2, 1, 1)


@pytest.fixture(params=["memory", "redis"])
async def windows(request) -> AsyncIterator[Callable[[], Window]]:
    """Makes windows over one shared budget: one process's window, or new Redis clients on one prefix."""
    opened: list[Window] = []
    if request.param == "memory":
        shared = MemoryWindow()

        def make() -> Window:
            return shared
    else:
        redis_url = request.getfixturevalue("redis_url")
        prefix = f"test-rl-{uuid.uuid4().hex}"

        def make() -> Window:
            window = RedisWindow(redis_url, prefix)
            opened.append(window)
            return window
    yield make
    for window in opened:
        await window.aclose()


async def test_concurrent_calls_share_one_budget_and_wait_for_the_oldest(windows) -> None:
    first, second = windows(), windows()
    results = await asyncio.gather(*(w.reserve("acme", [REQUEST], 0.5) for w in (first, second, first, second)))
    assert sum(r is None for r in results) == 2, "two of four concurrent calls fit a budget of two"
    short = next(r for r in results if r is not None)
    assert short.dimension is Dimension.REQUESTS and 0 < short.wait_s <= 0.5
    assert await second.reserve("globex", [REQUEST], 0.5) is None, "another key is not slowed"
    await asyncio.sleep(short.wait_s)  # the window's own answer: room frees then
    assert await second.reserve("acme", [REQUEST], 0.5) is None


async def test_all_or_nothing_and_output_tokens_recorded_later(windows) -> None:
    window = windows()
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


async def test_a_call_larger_than_the_whole_budget_goes_once_the_window_is_empty(windows) -> None:
    window = windows()
    huge = Charge(Dimension.INPUT_TOKENS, 100, 500, 500)
    assert await window.reserve("k", [huge], 0.3) is None
    short = await window.reserve("k", [huge], 0.3)
    assert short is not None and 0 < short.wait_s <= 0.3


async def test_a_redis_window_counts_in_this_process_while_redis_is_away(redis_url: str) -> None:
    """Redis cut (a relay the test closes): calls go on, under the limits counted in this process;
    when it is back, the shared counts are used again."""
    target = urlsplit(redis_url)
    relay = TcpRelay(target.port or 6379)
    await relay.start()
    window = RedisWindow(f"redis://127.0.0.1:{relay.port}{target.path}", f"test-rl-{uuid.uuid4().hex}")
    try:
        assert await window.reserve("acme", [REQUEST], 60) is None  # shared: one of two taken in Redis
        relay.cut()
        assert await window.reserve("acme", [REQUEST], 60) is None  # alone: one of two
        assert await window.reserve("acme", [REQUEST], 60) is None  # alone: two of two
        short = await window.reserve("acme", [REQUEST], 60)
        assert short is not None and short.dimension is Dimension.REQUESTS  # the limit still holds
        assert window.absence.away
        await window.record("acme", Dimension.OUTPUT_TOKENS, 5, 60)  # recorded alone, no error
        relay.restore()
        # Tried again once its pause has passed: refused here (two of two) until Redis answers, then
        # shared again (two of two in Redis).
        async with asyncio.timeout(5):
            while await window.reserve("acme", [REQUEST], 60) is not None:
                await asyncio.sleep(0.05)
        assert not window.absence.away
    finally:
        await window.aclose()
        await relay.close()
