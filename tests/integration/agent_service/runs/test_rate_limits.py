"""Rate limits on model calls, on a real service: over the limit a run waits (WAITING) and completes;
past the longest wait it ends RATE_LIMITED with when to retry; replicas with Redis share one budget."""

from __future__ import annotations

import time
import uuid

from shared.rate_limit import RateLimitSettings

MESSAGE = "hello there"
OTHER_ORG = {"user_id": "u-2", "org_id": "o-2"}
WINDOW_S = 1.5


def _limits(**overrides) -> RateLimitSettings:
    return RateLimitSettings(**({"requests": 2, "window_s": WINDOW_S} | overrides))


async def test_the_third_call_in_the_window_waits_then_completes(agent_factory) -> None:
    async with agent_factory(rate_limit=_limits()) as agent:
        started = time.monotonic()
        first, second = await agent.execute(MESSAGE), await agent.execute(MESSAGE)
        other = await agent.execute(MESSAGE, body={"user_context": OTHER_ORG})
        third = await agent.execute(MESSAGE)
        elapsed = time.monotonic() - started
        metrics = (await agent.http.get("/metrics")).text
    for result in (first, second, other):
        assert result.last.type.value == "COMPLETE" and not result.of_type("WAITING")
    [waiting] = third.of_type("WAITING")
    assert waiting.data["limit"] == "requests" and 0 < waiting.data["wait_s"] <= WINDOW_S
    assert "2 requests per 1.5 s" in waiting.data["reason"] and "organisation o-1" in waiting.data["reason"]
    assert third.events.index(waiting) < third.events.index(third.of_type("ANSWER_CHUNK")[0])
    assert third.last.type.value == "COMPLETE"
    assert elapsed >= WINDOW_S * 0.9, "the third call went after the first left the window"
    assert 'agent_rate_limit_waits_total{limit="requests"} 1.0' in metrics


async def test_a_wait_past_the_maximum_ends_rate_limited_with_when_to_retry(agent_factory) -> None:
    async with agent_factory(rate_limit=_limits(requests=1, window_s=60, max_wait_s=0.5)) as agent:
        assert (await agent.execute(MESSAGE)).last.type.value == "COMPLETE"
        refused = await agent.execute(MESSAGE)
        status = await agent.status(refused.last.session_id)
    error = refused.last
    assert error.type.value == "ERROR" and error.data["code"] == "RATE_LIMITED"
    assert error.data["retryable"] is True and 59 < error.data["retry_after_s"] <= 60
    assert "retry in 60 s" in error.data["message"]
    assert not refused.of_type("WAITING"), "a wait that would be too long is not started"
    assert status["status"] == "FAILED"


async def test_two_replicas_share_one_budget_through_redis(agent_factory, redis_url: str) -> None:
    limits = _limits(redis_prefix=f"test-rl-{uuid.uuid4().hex}")
    async with agent_factory(rate_limit=limits, redis_url=redis_url) as one, \
            agent_factory(rate_limit=limits, redis_url=redis_url) as two:
        assert not (await one.execute(MESSAGE)).of_type("WAITING")
        assert not (await two.execute(MESSAGE)).of_type("WAITING")
        third = await one.execute(MESSAGE)
        other = await two.execute(MESSAGE, body={"user_context": OTHER_ORG})
    assert third.of_type("WAITING") and third.last.type.value == "COMPLETE"
    assert not other.of_type("WAITING")
