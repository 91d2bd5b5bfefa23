"""The direct path honours the same rate limits (AGENT_SERVICE_RATE_LIMIT_*) for its own model calls:
over the limit a reply waits visibly (``agent.waiting``) and then streams; past the longest wait it
ends as an error saying when to retry. With Redis, the agent's calls and the direct path's draw on
one budget."""

from __future__ import annotations

import time
import uuid

import httpx

from shared.rate_limit import RateLimitSettings
from tests.integration.conversation_service.support import (
    auth,
    collect_until,
    connect,
    make_settings,
    new_conversation,
    running,
)
from tests.integration.delegation.stack import agent_service, chat_service, recv_until


async def _reply(client: httpx.AsyncClient, base: str, ws, conversation_id: str, content: str = "tell me a joke"):
    r = await client.post(f"{base}/conversations/{conversation_id}/messages", json={"content": content},
                          headers=auth("alice"))
    assert r.status_code == 202, r.text
    return await collect_until(ws, lambda f: f["type"] in ("message.completed", "message.error"))


async def test_a_direct_reply_over_the_limit_waits_then_streams(database_url: str) -> None:
    settings = make_settings(database_url, rate_limit=RateLimitSettings(requests=2, window_s=1.5))
    async with running(settings) as (base, _), httpx.AsyncClient() as client:
        conv = await new_conversation(client, base, "alice")
        async with await connect(base, conv["id"], "alice") as ws:
            started = time.monotonic()
            first, second = await _reply(client, base, ws, conv["id"]), await _reply(client, base, ws, conv["id"])
            third = await _reply(client, base, ws, conv["id"])
            elapsed = time.monotonic() - started
    assert not [f for f in first + second if f["type"] == "agent.waiting"]
    [waiting] = [f for f in third if f["type"] == "agent.waiting"]
    assert "2 requests per 1.5 s" in waiting["data"]["reason"] and "organisation acme" in waiting["data"]["reason"]
    assert 0 < waiting["data"]["wait_s"] <= 1.5
    assert third[-1]["type"] == "message.completed" and third[-1]["data"]["content"]
    assert waiting["data"]["message_id"] == third[-1]["data"]["message_id"]
    assert elapsed >= 1.5 * 0.9


async def test_a_direct_reply_past_the_longest_wait_says_when_to_retry(database_url: str) -> None:
    limits = RateLimitSettings(requests=1, window_s=60, max_wait_s=0.5)
    async with running(make_settings(database_url, rate_limit=limits)) as (base, _), httpx.AsyncClient() as client:
        conv = await new_conversation(client, base, "alice")
        async with await connect(base, conv["id"], "alice") as ws:
            assert (await _reply(client, base, ws, conv["id"]))[-1]["type"] == "message.completed"
            refused = await _reply(client, base, ws, conv["id"])
        metrics = (await client.get(f"{base}/metrics")).text
    error = refused[-1]
    assert error["type"] == "message.error" and error["data"]["code"] == "rate_limited"
    assert error["data"]["text"] == "Your organisation has reached its usage limit. Please try again in 60 s."
    assert 'conversation_direct_replies_total{outcome="rate_limited"} 1.0' in metrics


async def test_the_agent_and_the_direct_path_share_one_budget_through_redis(database_factory, tmp_path, redis_url):
    limits = {"requests": 2, "window_s": 2.0, "redis_prefix": f"test-rl-{uuid.uuid4().hex}"}
    agent_db, chat_db = await database_factory("agent"), await database_factory("chat")
    # One REDIS_URL for both services, as deployed: the chat's fan-out and both services' budget.
    async with agent_service(agent_db, tmp_path, rate_limit=limits, redis_url=redis_url) as agent_url, \
            chat_service(chat_db, agent_url, rate_limit=RateLimitSettings(**limits), redis_url=redis_url) as stack:
        cid = await stack.conversation()
        ws = await connect(stack.chat_url, cid, "alice")
        done = ("agent.complete", "message.completed", "agent.error", "message.error")
        await stack.send(cid, "/agent hello there")
        agent_turn = await recv_until(ws, lambda f: f["type"] == "agent.complete")
        frames = []
        for _ in range(2):
            # A plain message in a new conversation: the direct path.
            plain = await stack.conversation()
            plain_ws = await connect(stack.chat_url, plain, "alice")
            await stack.send(plain, "tell me a joke")
            frames.append(await recv_until(plain_ws, lambda f: f["type"] in done))
            await plain_ws.close()
        await ws.close()
    assert not [f for f in agent_turn if f["type"] == "agent.waiting"]
    assert not [f for f in frames[0] if f["type"] == "agent.waiting"]
    assert [f for f in frames[1] if f["type"] == "agent.waiting"], "the agent's call and one direct call used the budget"
    assert frames[1][-1]["type"] == "message.completed"
