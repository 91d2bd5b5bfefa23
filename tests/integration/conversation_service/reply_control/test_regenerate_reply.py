"""Regenerate the last answer, and Retry a failed one through the same route, against a real
OpenAI-compatible server: the old answer is replaced (kept in storage, out of the prompt), a new
one streams, and only the conversation's last, ended answer may be replaced."""

from __future__ import annotations

from contextlib import AsyncExitStack

import httpx

from tests.integration.conversation_service.support import (
    auth,
    collect_until,
    connect,
    make_settings,
    new_conversation,
    running,
)
from tests.support.fake_openai import ErrorReply, FakeOpenAI, TextReply, running_fake_openai


def _ended(frame: dict) -> bool:
    return frame["type"] in ("message.completed", "message.error")


async def _regenerate(client: httpx.AsyncClient, base: str, cid: str, message_id: str, user: str = "alice"):
    return await client.post(f"{base}/conversations/{cid}/messages/{message_id}/regenerate", headers=auth(user))


async def _messages(client: httpx.AsyncClient, base: str, cid: str) -> list[dict]:
    r = await client.get(f"{base}/conversations/{cid}/messages", headers=auth("alice"))
    assert r.status_code == 200, r.text
    return r.json()["items"]


async def _chat(stack: AsyncExitStack, database_url: str, monkeypatch, fake: FakeOpenAI):
    _, api_root = await stack.enter_async_context(running_fake_openai(fake))
    monkeypatch.setenv("LLM_PROVIDER", "openai")
    monkeypatch.setenv("LLM_BASE_URL", api_root)
    base, app = await stack.enter_async_context(running(make_settings(database_url)))
    client = await stack.enter_async_context(httpx.AsyncClient(timeout=30))
    return base, app, client


async def test_regenerate_replaces_the_last_answer_with_a_new_one(database_url: str, monkeypatch) -> None:
    fake = FakeOpenAI()
    fake.enqueue(TextReply(text="The first answer."), TextReply(text="Another answer entirely."))
    async with AsyncExitStack() as stack:
        base, app, client = await _chat(stack, database_url, monkeypatch, fake)
        cid = (await new_conversation(client, base, "alice"))["id"]
        tab = await stack.enter_async_context(await connect(base, cid, "alice"))
        sent = await client.post(f"{base}/conversations/{cid}/messages", json={"content": "Say something"},
                                 headers=auth("alice"))
        first = (await collect_until(tab, _ended))[-1]["data"]
        await app.state.tasks.join()

        regenerated = await _regenerate(client, base, cid, first["message_id"])
        assert regenerated.status_code == 202, regenerated.text
        frames = await collect_until(tab, _ended)
        await app.state.tasks.join()
        items = await _messages(client, base, cid)
        again = await _regenerate(client, base, cid, first["message_id"])

    body = regenerated.json()
    assert (body["replaced_message_id"], body["in_reply_to"]) == (first["message_id"], sent.json()["message_id"])
    assert body["route"]["target"] == "direct_llm"
    assert first["content"] == "The first answer."
    types = [f["type"] for f in frames]
    assert types[0] == "message.replaced" and frames[0]["data"]["message_id"] == first["message_id"]
    assert "message.created" in types and types[-1] == "message.completed"
    new = frames[-1]["data"]
    assert new["message_id"] != first["message_id"] and new["content"] == "Another answer entirely."
    # The old answer stays stored, marked replaced; the new one answers the same user message.
    assert [(m["role"], m["status"], m["content"]) for m in items] == [
        ("user", "complete", "Say something"),
        ("assistant", "replaced", "The first answer."),
        ("assistant", "complete", "Another answer entirely."),
    ]
    assert items[2]["agent_metadata"]["in_reply_to"] == sent.json()["message_id"]
    # The model was not shown the answer it replaces.
    second_prompt = fake.requests[1].body["messages"]
    assert [m["content"] for m in second_prompt[1:]] == ["Say something"]
    assert again.status_code == 409  # replaced already


async def test_retry_answers_a_failed_reply_again(database_url: str, monkeypatch) -> None:
    fake = FakeOpenAI()
    fake.enqueue(ErrorReply(400, "the model refused"), TextReply(text="It worked this time."))
    async with AsyncExitStack() as stack:
        base, app, client = await _chat(stack, database_url, monkeypatch, fake)
        cid = (await new_conversation(client, base, "alice"))["id"]
        tab = await stack.enter_async_context(await connect(base, cid, "alice"))
        await client.post(f"{base}/conversations/{cid}/messages", json={"content": "Please answer"},
                          headers=auth("alice"))
        failed = (await collect_until(tab, _ended))[-1]
        await app.state.tasks.join()
        retried = await _regenerate(client, base, cid, failed["data"]["message_id"])
        frames = await collect_until(tab, _ended)
        await app.state.tasks.join()
        items = await _messages(client, base, cid)

    assert failed["type"] == "message.error" and failed["data"]["retryable"] is True
    assert retried.status_code == 202, retried.text
    assert frames[-1]["type"] == "message.completed" and frames[-1]["data"]["content"] == "It worked this time."
    assert [(m["role"], m["status"]) for m in items] == [
        ("user", "complete"), ("assistant", "replaced"), ("assistant", "complete"),
    ]


async def test_only_the_last_ended_answer_of_ones_own_is_regenerated(database_url: str, monkeypatch) -> None:
    fake = FakeOpenAI(tokens=400, token_delay_ms=40)
    fake.enqueue(TextReply(text="One."), TextReply(text="Two."))
    async with AsyncExitStack() as stack:
        base, app, client = await _chat(stack, database_url, monkeypatch, fake)
        cid = (await new_conversation(client, base, "alice"))["id"]
        tab = await stack.enter_async_context(await connect(base, cid, "alice"))
        for text in ("first", "second"):
            await client.post(f"{base}/conversations/{cid}/messages", json={"content": text}, headers=auth("alice"))
            await collect_until(tab, _ended)
            await app.state.tasks.join()
        user_1, reply_1, _user_2, reply_2 = await _messages(client, base, cid)

        not_last = await _regenerate(client, base, cid, reply_1["id"])
        not_a_reply = await _regenerate(client, base, cid, user_1["id"])
        others = await _regenerate(client, base, cid, reply_2["id"], user="bob")
        # A third message streams (the slow default reply): nothing is regenerated meanwhile.
        await client.post(f"{base}/conversations/{cid}/messages", json={"content": "third"}, headers=auth("alice"))
        streaming = (await collect_until(tab, lambda f: f["type"] == "message.delta"))[-1]["data"]["message_id"]
        while_streaming = await _regenerate(client, base, cid, reply_2["id"])
        streaming_itself = await _regenerate(client, base, cid, streaming)
        stop = await client.post(f"{base}/conversations/{cid}/messages/{streaming}/stop", headers=auth("alice"))
        await collect_until(tab, _ended)
        await app.state.tasks.join()

    assert not_last.status_code == 409 and "last" in not_last.json()["detail"]
    assert not_a_reply.status_code == 409
    assert others.status_code == 404
    assert while_streaming.status_code == 409
    assert streaming_itself.status_code == 409
    assert stop.status_code == 202
