"""SubscribeToTask: the snapshot and every later event once, on this replica and another, across a
question, and the resume from a seq (``Last-Event-ID``) that A2A itself lacks."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from shared.protocol import EventType
from tests.integration.a2a.conftest import A2AClient, GatedModel
from tests.integration.a2a.test_a2a_server import _log

CHUNKS = ["one ", "two ", "three ", "four"]


def _seq(update: dict[str, Any]) -> int:
    return update[next(iter(update))]["metadata"]["seq"]


def _answer_text(updates: list[dict[str, Any]]) -> str:
    return "".join(u["artifactUpdate"]["artifact"]["parts"][0]["text"] for u in updates if "artifactUpdate" in u)


async def _cut_stream(client: A2AClient, model: GatedModel) -> str:
    """A streamed task whose client went away once it had the text of two chunks; the model holds
    after them. (The service may send the two as one update: deltas that arrive together are one.)"""
    message = {"role": "ROLE_USER", "parts": [{"text": "count"}], "messageId": "cut"}
    method = "/message:stream" if client.rest else "SendStreamingMessage"
    so_far = "".join(CHUNKS[:2])
    seen = await client.stream(method, {"message": message},
                               until=lambda events: _answer_text([e for _, e in events]) == so_far)
    await model.holding.wait()
    return seen[0][1]["task"]["id"]


async def _subscribe_then_release(client: A2AClient, model: GatedModel, task_id: str, **kw: Any) -> list:
    started = asyncio.Event()
    method = f"/tasks/{task_id}:subscribe" if client.rest else "SubscribeToTask"
    params = {} if client.rest else {"id": task_id}
    subscription = asyncio.create_task(client.stream(method, params, started=started, **kw))
    await started.wait()
    model.release.set()
    return await subscription


@pytest.mark.parametrize("rest", [False, True], ids=["jsonrpc", "http_json"])
async def test_a_subscriber_after_a_cut_gets_the_answer_so_far_then_every_later_event_once(a2a_factory, rest) -> None:
    model = GatedModel(CHUNKS, hold_after=2)
    async with a2a_factory(provider=model) as url:
        client = A2AClient(url, rest=rest)
        try:
            task_id = await _cut_stream(client, model)
            events = await _subscribe_then_release(client, model, task_id)
            log = await _log(url, (await client.get(task_id))["contextId"])
        finally:
            await client.aclose()

    snapshot, updates = events[0][1]["task"], [e for _, e in events[1:]]
    assert snapshot["status"]["state"] == "TASK_STATE_WORKING"
    assert snapshot["artifacts"][0]["parts"][0]["text"] == "one two "
    after = snapshot["metadata"]["seq"]
    assert events[0][0] == after
    assert [_seq(u) for u in updates] == sorted(_seq(u) for u in updates)
    assert {_seq(u) for u in updates} == {e.seq for e in log if e.seq > after}
    assert snapshot["artifacts"][0]["parts"][0]["text"] + _answer_text(updates) == "".join(CHUNKS)
    assert updates[0]["artifactUpdate"]["append"] is True
    assert updates[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


@pytest.mark.parametrize("rest", [False, True], ids=["jsonrpc", "http_json"])
async def test_last_event_id_resumes_after_that_seq_also_once_the_task_ended(a2a_url: str, rest: bool) -> None:
    client = A2AClient(a2a_url, rest=rest)
    try:
        task = await client.send("what is 12*12")
        log = [e for e in await _log(a2a_url, task["contextId"]) if e.run_id == task["id"]]
        middle = log[len(log) // 2].seq
        method = f"/tasks/{task['id']}:subscribe" if rest else "SubscribeToTask"
        events = await client.stream(method, {} if rest else {"id": task["id"]},
                                     headers={"Last-Event-ID": str(middle)})
    finally:
        await client.aclose()

    updates = [e for _, e in events]
    assert "task" not in updates[0]  # no snapshot: the client has everything up to its seq
    assert sorted({_seq(u) for u in updates}) == [e.seq for e in log if e.seq > middle]
    chunks = "".join(e.data["text"] for e in log if e.type is EventType.ANSWER_CHUNK and e.seq > middle)
    assert _answer_text(updates) == chunks
    assert updates[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_another_replica_streams_the_task_from_the_log_through_its_question(a2a_factory) -> None:
    """Replica B follows a task that replica A runs: it waits through the question, and the answer
    (sent to A) carries its stream on to the end."""
    async with a2a_factory() as url_a, a2a_factory() as url_b:
        a, b = A2AClient(url_a), A2AClient(url_b)
        try:
            asked = await a.send("plan a trip")
            started = asyncio.Event()
            subscription = asyncio.create_task(b.stream("SubscribeToTask", {"id": asked["id"]}, started=started))
            await started.wait()
            done = await a.send("Lisbon, for 3 days", taskId=asked["id"])
            events = await asyncio.wait_for(subscription, timeout=30)
            log = await _log(url_a, asked["contextId"])
        finally:
            await a.aclose()
            await b.aclose()

    snapshot, updates = events[0][1]["task"], [e for _, e in events[1:]]
    assert snapshot["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert [_seq(u) for u in updates] == sorted(_seq(u) for u in updates)
    assert {_seq(u) for u in updates} == {e.seq for e in log if e.seq > snapshot["metadata"]["seq"]}
    assert updates[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert _answer_text(updates) == done["artifacts"][0]["parts"][0]["text"]
