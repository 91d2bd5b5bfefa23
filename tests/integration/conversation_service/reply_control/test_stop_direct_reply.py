"""Stop a direct reply, against a real OpenAI-compatible server streaming slowly: it ends ``stopped``
for every client and in storage with its text so far, whichever replica streams it; only the
owner may stop it, and only while it streams."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import httpx

from conversation_service.db.models import TurnStatus
from conversation_service.turns.repository import TurnRepository
from shared.transactions import transaction
from tests.integration.conversation_service.support import (
    auth,
    collect_until,
    connect,
    make_settings,
    new_conversation,
    running,
)
from tests.support.fake_openai import FakeOpenAI, running_fake_openai

# 400 words at 40 ms each: a reply that would stream for 16 s, stopped long before.
SLOW = {"tokens": 400, "token_delay_ms": 40}


@asynccontextmanager
async def slow_model(monkeypatch, **pace) -> AsyncIterator[FakeOpenAI]:
    async with running_fake_openai(FakeOpenAI(**(pace or SLOW))) as (fake, api_root):
        monkeypatch.setenv("LLM_PROVIDER", "openai")
        monkeypatch.setenv("LLM_BASE_URL", api_root)
        yield fake


def _first_delta(frame: dict) -> bool:
    return frame["type"] == "message.delta"


def _ended(frame: dict) -> bool:
    return frame["type"] in ("message.completed", "message.error")


def _deltas(frames: list[dict], message_id: str) -> str:
    return "".join(f["data"]["text"] for f in frames if f["type"] == "message.delta"
                   and f["data"]["message_id"] == message_id)


async def _stop(client: httpx.AsyncClient, base: str, cid: str, message_id: str, user: str = "alice"):
    return await client.post(f"{base}/conversations/{cid}/messages/{message_id}/stop", headers=auth(user))


async def _messages(client: httpx.AsyncClient, base: str, cid: str) -> list[dict]:
    r = await client.get(f"{base}/conversations/{cid}/messages", headers=auth("alice"))
    assert r.status_code == 200, r.text
    return r.json()["items"]


async def test_stop_ends_a_direct_reply_for_every_client_and_in_storage(database_url: str, monkeypatch) -> None:
    async with slow_model(monkeypatch), AsyncExitStack() as stack:
        base, app = await stack.enter_async_context(running(make_settings(database_url)))
        client = await stack.enter_async_context(httpx.AsyncClient(timeout=30))
        cid = (await new_conversation(client, base, "alice"))["id"]
        tab1 = await stack.enter_async_context(await connect(base, cid, "alice"))
        tab2 = await stack.enter_async_context(await connect(base, cid, "alice"))
        sent = await client.post(f"{base}/conversations/{cid}/messages", json={"content": "Tell me a long story"},
                                 headers=auth("alice"))
        assert sent.status_code == 202 and sent.json()["route"]["target"] == "direct_llm"
        before = await collect_until(tab1, _first_delta)
        reply_id = before[-1]["data"]["message_id"]

        stopped = await _stop(client, base, cid, reply_id)
        assert stopped.status_code == 202, stopped.text
        assert stopped.json() == {"message_id": reply_id, "status": "stopping"}
        frames1 = before + await collect_until(tab1, _ended)
        frames2 = await collect_until(tab2, _ended)
        await app.state.tasks.join()
        items = await _messages(client, base, cid)
        async with transaction(app.state.storage.sessionmaker) as session:
            turn = await TurnRepository(session).get(sent.json()["message_id"])

    for frames in (frames1, frames2):
        end = frames[-1]
        assert end["type"] == "message.completed" and end["data"]["message_id"] == reply_id
        assert end["data"]["status"] == "stopped"
        # The text so far is kept: exactly what the deltas had shown, far short of the whole reply.
        assert end["data"]["content"] == _deltas(frames, reply_id)
        assert 0 < len(end["data"]["content"].split()) < 400
    reply = items[-1]
    assert (reply["id"], reply["status"], reply["content"]) == (reply_id, "stopped", frames1[-1]["data"]["content"])
    assert turn.status == TurnStatus.DONE.value and turn.stop_requested_at is not None
    assert app.state.metrics.registry.get_sample_value(
        "conversation_direct_replies_total", {"outcome": "stopped"}) == 1.0


async def test_stop_reaches_the_replica_that_streams_the_reply(database_url: str, monkeypatch) -> None:
    """The stop is sent to replica B; replica A streams the reply and ends it at its next lease
    renewal, which reads the stop stored on the turn."""
    leases = {"turn_lease_s": 1.5, "turn_sweep_interval_s": 0.5}
    async with slow_model(monkeypatch), AsyncExitStack() as stack:
        base_a, app_a = await stack.enter_async_context(running(make_settings(database_url, **leases)))
        base_b, app_b = await stack.enter_async_context(running(make_settings(database_url, **leases)))
        client = await stack.enter_async_context(httpx.AsyncClient(timeout=30))
        cid = (await new_conversation(client, base_a, "alice"))["id"]
        tab = await stack.enter_async_context(await connect(base_a, cid, "alice"))
        sent = await client.post(f"{base_a}/conversations/{cid}/messages", json={"content": "Tell me a long story"},
                                 headers=auth("alice"))
        assert sent.status_code == 202
        before = await collect_until(tab, _first_delta)
        reply_id = before[-1]["data"]["message_id"]

        stopped = await _stop(client, base_b, cid, reply_id)
        assert stopped.status_code == 202, stopped.text
        frames = before + await collect_until(tab, _ended, timeout=10)
        await app_a.state.tasks.join()
        items = await _messages(client, base_b, cid)

    end = frames[-1]
    assert end["type"] == "message.completed" and end["data"]["status"] == "stopped"
    assert end["data"]["content"] == _deltas(frames, reply_id)
    assert (items[-1]["id"], items[-1]["status"]) == (reply_id, "stopped")
    assert app_b.state.tasks.running == 0


async def test_only_the_owner_stops_and_only_a_streaming_reply(database_url: str, monkeypatch) -> None:
    async with slow_model(monkeypatch), AsyncExitStack() as stack:
        base, app = await stack.enter_async_context(running(make_settings(database_url)))
        client = await stack.enter_async_context(httpx.AsyncClient(timeout=30))
        cid = (await new_conversation(client, base, "alice"))["id"]
        bobs = (await new_conversation(client, base, "bob"))["id"]
        tab = await stack.enter_async_context(await connect(base, cid, "alice"))
        sent = await client.post(f"{base}/conversations/{cid}/messages", json={"content": "Tell me a long story"},
                                 headers=auth("alice"))
        user_message_id = sent.json()["message_id"]
        reply_id = (await collect_until(tab, _first_delta))[-1]["data"]["message_id"]

        # Another user's conversation, or their own conversation with her message: not found.
        assert (await _stop(client, base, cid, reply_id, user="bob")).status_code == 404
        assert (await _stop(client, base, bobs, reply_id, user="bob")).status_code == 404
        assert (await _stop(client, base, cid, "no-such-message")).status_code == 404
        # Her own message is not a reply.
        not_a_reply = await _stop(client, base, cid, user_message_id)
        assert not_a_reply.status_code == 409 and not_a_reply.json()["error"] == "conflict"

        assert (await _stop(client, base, cid, reply_id)).status_code == 202
        await collect_until(tab, _ended)
        await app.state.tasks.join()
        # Ended: there is nothing to stop any more.
        finished = await _stop(client, base, cid, reply_id)
        items = await _messages(client, base, cid)
    assert finished.status_code == 409 and finished.json()["error"] == "conflict"
    assert items[-1]["status"] == "stopped"


async def test_a_completed_reply_cannot_be_stopped(database_url: str, monkeypatch) -> None:
    async with slow_model(monkeypatch, tokens=5, token_delay_ms=0), AsyncExitStack() as stack:
        base, app = await stack.enter_async_context(running(make_settings(database_url)))
        client = await stack.enter_async_context(httpx.AsyncClient(timeout=30))
        cid = (await new_conversation(client, base, "alice"))["id"]
        await client.post(f"{base}/conversations/{cid}/messages", json={"content": "hello"}, headers=auth("alice"))
        await app.state.tasks.join()
        reply = (await _messages(client, base, cid))[-1]
        refused = await _stop(client, base, cid, reply["id"])
        after = (await _messages(client, base, cid))[-1]
    assert reply["status"] == "complete"
    assert refused.status_code == 409
    assert (after["status"], after["content"]) == ("complete", reply["content"])
