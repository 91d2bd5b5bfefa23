"""The in-process sliding window: all dimensions of a call fit or none is taken; the wait is until enough ages out."""

from __future__ import annotations

from shared.rate_limit.config import Dimension
from shared.rate_limit.window import Charge, MemoryWindow

REQUEST = Charge(Dimension.REQUESTS, 2, 1, 1)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_requests_fit_until_the_limit_then_wait_for_the_oldest_to_age_out() -> None:
    clock = Clock()
    window = MemoryWindow(clock)
    assert await window.reserve("k", [REQUEST], 60) is None
    clock.now += 10
    assert await window.reserve("k", [REQUEST], 60) is None
    clock.now += 5
    short = await window.reserve("k", [REQUEST], 60)
    assert short is not None and short.dimension is Dimension.REQUESTS
    assert short.wait_s == 45  # the first call leaves the window 60 s after it was made
    clock.now += 45
    assert await window.reserve("k", [REQUEST], 60) is None
    assert await window.reserve("other", [REQUEST], 60) is None, "each key has its own budget"


async def test_a_call_that_does_not_fit_one_dimension_takes_nothing() -> None:
    clock = Clock()
    window = MemoryWindow(clock)
    tokens = Charge(Dimension.INPUT_TOKENS, 100, 80, 80)
    assert await window.reserve("k", [REQUEST, tokens], 60) is None
    short = await window.reserve("k", [REQUEST, tokens], 60)
    assert short is not None and short.dimension is Dimension.INPUT_TOKENS
    small = Charge(Dimension.INPUT_TOKENS, 100, 20, 20)
    assert await window.reserve("k", [REQUEST, small], 60) is None, "the refused call took no request"


async def test_output_tokens_recorded_after_the_call_block_the_next_one() -> None:
    clock = Clock()
    window = MemoryWindow(clock)
    output = Charge(Dimension.OUTPUT_TOKENS, 50, 1, 0)
    assert await window.reserve("k", [output], 60) is None
    await window.record("k", Dimension.OUTPUT_TOKENS, 50, 60)
    clock.now += 1
    short = await window.reserve("k", [output], 60)
    assert short is not None and short.wait_s == 59


async def test_a_call_larger_than_the_budget_goes_alone_once_the_window_is_empty() -> None:
    clock = Clock()
    window = MemoryWindow(clock)
    huge = Charge(Dimension.INPUT_TOKENS, 100, 500, 500)
    assert await window.reserve("k", [huge], 60) is None
    clock.now += 30
    short = await window.reserve("k", [huge], 60)
    assert short is not None and short.wait_s == 30


async def test_budgets_of_organisations_that_stopped_calling_are_forgotten() -> None:
    clock = Clock()
    window = MemoryWindow(clock, sweep_every_s=60)
    tokens = Charge(Dimension.INPUT_TOKENS, 1000, 10, 10)
    for org in range(500):
        assert await window.reserve(f"org-{org}", [REQUEST, tokens], 60) is None
        await window.record(f"org-{org}", Dimension.OUTPUT_TOKENS, 5, 60)
        clock.now += 0.1
    assert len(window) == 1500  # three dimensions each, all within the window
    clock.now += 60
    assert await window.reserve("org-0", [REQUEST], 60) is None  # a new window for the one still calling
    assert len(window) == 1
    # ...and what it took is still counted.
    assert await window.reserve("org-0", [Charge(Dimension.REQUESTS, 1, 1, 1)], 60) is not None
