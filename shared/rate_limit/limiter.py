"""``RateLimiter``: before a model call, wait for room in its organisation's and model's budget.

Over a limit the caller waits rather than fails: ``acquire`` says why and for how long through
``on_wait`` (the Agent Service turns that into a WAITING event, the chat page into a countdown),
sleeps and checks again (another call may have taken the room meanwhile). A call whose total wait
would pass ``max_wait_s`` raises ``RateLimited`` at once, with the time it could be retried.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from shared.rate_limit.config import Dimension, Limits, RateLimitConfig
from shared.rate_limit.window import Charge, Shortfall, Window

_UNITS = {Dimension.REQUESTS: "requests", Dimension.INPUT_TOKENS: "input tokens", Dimension.OUTPUT_TOKENS: "output tokens"}


@dataclass(frozen=True, slots=True)
class Wait:
    """Why a call waits, said to the user: ``reason`` is a sentence, ``wait_s`` the time left."""

    reason: str
    wait_s: float
    dimension: Dimension


class RateLimited(Exception):
    def __init__(self, reason: str, retry_after_s: float) -> None:
        super().__init__(f"{reason}; retry in {retry_after_s:.0f} s")
        self.reason = reason
        self.retry_after_s = retry_after_s


OnWait = Callable[[Wait], Awaitable[None]]
CountTokens = Callable[[], Awaitable[int]]


def budget_key(org: str | None, model: str) -> str:
    """Unambiguous whatever the names hold (an organisation may contain the separator)."""
    org = org or "-"
    return f"{len(org)}:{org}:{model}"


class RateLimiter:
    def __init__(self, config: RateLimitConfig, window: Window, *, max_wait_s: float) -> None:
        self.config = config
        self.window = window
        self.max_wait_s = max_wait_s

    async def acquire(self, org: str | None, model: str, input_tokens: CountTokens, on_wait: OnWait) -> None:
        """Take one request (and its input tokens) from the budget, waiting for room as needed.
        ``input_tokens`` is only called when input tokens are limited (counting costs a tokenizer pass)."""
        limits = self.config.limits_for(org, model)
        if limits.unlimited:
            return
        charges = _charges(limits, await input_tokens() if limits.input_tokens else 0)
        key = budget_key(org, model)
        waited = 0.0
        while (short := await self.window.reserve(key, charges, limits.window_s)) is not None:
            reason = _reason(short, limits, org, model)
            if waited + short.wait_s > self.max_wait_s:
                raise RateLimited(reason, short.wait_s)
            await on_wait(Wait(reason, round(short.wait_s, 3), short.dimension))
            started = time.monotonic()
            # A real wait for the budget, not a guess at a race: the window says when room frees.
            await asyncio.sleep(short.wait_s)
            waited += time.monotonic() - started

    async def record_output(self, org: str | None, model: str, tokens: int) -> None:
        limits = self.config.limits_for(org, model)
        if limits.output_tokens and tokens > 0:
            await self.window.record(budget_key(org, model), Dimension.OUTPUT_TOKENS, tokens, limits.window_s)

    async def aclose(self) -> None:
        await self.window.aclose()


def _charges(limits: Limits, input_tokens: int) -> list[Charge]:
    charges = []
    if limits.requests:
        charges.append(Charge(Dimension.REQUESTS, limits.requests, 1, 1))
    if limits.input_tokens:
        charges.append(Charge(Dimension.INPUT_TOKENS, limits.input_tokens, input_tokens, input_tokens))
    if limits.output_tokens:
        charges.append(Charge(Dimension.OUTPUT_TOKENS, limits.output_tokens, 1, 0))
    return charges


def _reason(short: Shortfall, limits: Limits, org: str | None, model: str) -> str:
    who = f"organisation {org}" if org else "calls without an organisation"
    return (
        f"rate limit of {limits.of(short.dimension)} {_UNITS[short.dimension]} per {limits.window_s:g} s "
        f"reached for {who} on model {model}"
    )
