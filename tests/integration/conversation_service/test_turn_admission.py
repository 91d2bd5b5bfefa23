"""Admission of turns against a real server (SQLite and PostgreSQL): at most MAX_TURNS_IN_FLIGHT replies
run at once; the next message is accepted and waits visibly (``agent.waiting``, limit capacity) until
a place is free, then answered; the one past the queue is answered 503 with Retry-After at once and
nothing of it is stored; every accepted message is answered."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from shared.llm.config import LLMSettings
from tests.integration.conversation_service.support import (
    Reader,
    auth,
    connect,
    make_settings,
    new_conversation,
    running,
)

# A direct reply of the built-in model takes a second or two at this pace: long enough to hold its place.
SLOW = LLMSettings(llm_builtin_first_token_ms=0, llm_builtin_chunk_delay_ms=60)


async def _metric(client: httpx.AsyncClient, base: str, name: str) -> float:
    text = (await client.get(f"{base}/metrics")).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


async def test_one_runs_one_waits_visibly_one_is_refused_and_every_accepted_message_is_answered(
    database_url: str,
) -> None:
    settings = make_settings(database_url, llm=SLOW, max_turns_in_flight=1, max_queued_turns=1)
    async with running(settings) as (base, app), httpx.AsyncClient(timeout=30) as client:
        ids = [(await new_conversation(client, base, user))["id"] for user in ("alice", "bob", "carol")]
        readers = [Reader(await connect(base, cid, user)) for cid, user in zip(ids, ("alice", "bob", "carol"),
                                                                               strict=True)]
        first = await client.post(f"{base}/conversations/{ids[0]}/messages", json={"content": "hello there"},
                                  headers=auth("alice"))
        assert first.status_code == 202 and first.json()["route"]["target"] == "direct_llm", first.text
        second = await client.post(f"{base}/conversations/{ids[1]}/messages", json={"content": "hello there"},
                                   headers=auth("bob"))
        assert second.status_code == 202, second.text
        assert second.json()["route"] == {"target": "pending", "reason": "capacity"}
        third = await client.post(f"{base}/conversations/{ids[2]}/messages", json={"content": "hello there"},
                                  headers=auth("carol"))
        assert third.status_code == 503 and third.json()["error"] == "overloaded", third.text
        assert 1 <= int(third.headers["Retry-After"]) <= 300
        assert "try again" in third.json()["detail"]["message"]
        assert await _metric(client, base, "conversation_turns_refused_total") == 1
        assert await _metric(client, base, "conversation_turns_queued") == 1

        waiting = await readers[1].first(lambda f: f["type"] == "agent.waiting")
        assert waiting["data"]["message_id"] == second.json()["message_id"]
        assert waiting["data"]["limit"] == "capacity" and "capacity" in waiting["data"]["reason"]
        assert waiting["data"]["until"] and waiting["data"]["wait_s"] >= 0

        done_first = await readers[0].first(lambda f: f["type"] == "message.completed", timeout=30)
        done_second = await readers[1].first(lambda f: f["type"] == "message.completed", timeout=30)
        assert done_first["data"]["status"] == "complete" and done_second["data"]["status"] == "complete"
        order = [f["type"] for f in readers[1].frames]
        assert order.index("agent.waiting") < order.index("message.delta")
        # One place: the second reply's first chunk came after the first reply had ended.
        first_end = readers[0].frames.index(done_first)
        assert readers[0].received_at[first_end] <= readers[1].received_at[order.index("message.delta")]

        listed = await client.get(f"{base}/conversations/{ids[2]}/messages", headers=auth("carol"))
        assert listed.json()["items"] == [], "the refused message was not stored"
        await app.state.tasks.join()  # a reply's task ends (and gives its place back) just after its last frame
        assert await _metric(client, base, "conversation_turns_in_flight") == 0
        assert await _metric(client, base, "conversation_turns_queued") == 0
        for reader in readers:
            await reader.close()
