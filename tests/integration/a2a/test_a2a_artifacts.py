"""What the agent's tools make, over A2A (both bindings, SQLite and PostgreSQL): a file, a link and
data are artifacts of the task (in GetTask, ListTasks and the stream, as the log holds them, in the
order they were made), and a run the agent ended with a direct reply answers a client that waited
with a Message, which names the task it still is (runs are durable)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from tests.integration.a2a.conftest import A2AClient
from tests.integration.a2a.test_a2a_server import _log
from tests.support.models import ToolCallingModel

CALLS = [
    ("create_file", {"name": "output.txt", "content": "tck ✓", "description": "the notes"}),
    ("create_file", {"name": "pixel.bin", "content": base64.b64encode(b"\x00\x01\xff").decode(), "encoding": "base64"}),
    ("share_link", {"url": "https://example.com/output.txt", "name": "output.txt", "media_type": "text/plain"}),
    ("emit_data", {"data": {"key": "value", "count": 42}}),
]
BINDINGS = pytest.mark.parametrize("rest", [False, True], ids=["jsonrpc", "http_json"])
REPLY_PROFILES = """
profiles:
  - name: concierge
    system_prompt: Answer simple questions with reply.
    tools: [reply, create_file]
"""


def _message(text: str, message_id: str, **fields: Any) -> dict[str, Any]:
    return {"message": {"role": "ROLE_USER", "parts": [{"text": text}], "messageId": message_id, **fields}}


async def _send(client: A2AClient, params: dict[str, Any]) -> dict[str, Any]:
    """SendMessage's result: ``{"task": ...}`` or ``{"message": ...}``."""
    if client.rest:
        resp = await client.http.post("/a2a/v1/message:send", json=params)
        assert resp.status_code == 200, resp.text
        return resp.json()
    body = (await client.call("SendMessage", params)).json()
    assert "result" in body, body
    return body["result"]


async def _list(client: A2AClient, context_id: str) -> list[dict[str, Any]]:
    if client.rest:
        resp = await client.http.get("/a2a/v1/tasks", params={"contextId": context_id, "includeArtifacts": "true"})
        return resp.json()["tasks"]
    body = (await client.call("ListTasks", {"contextId": context_id, "includeArtifacts": True})).json()
    return body["result"]["tasks"]


@BINDINGS
async def test_a_task_holds_a_file_a_link_and_data_in_the_order_they_were_made(a2a_factory, rest: bool) -> None:
    async with a2a_factory(provider=ToolCallingModel(CALLS, ["Done."])) as url:
        client = A2AClient(url, rest=rest)
        try:
            task = (await _send(client, _message("write it down", "m-files")))["task"]
            got = await client.get(task["id"])
            listed = await _list(client, task["contextId"])
            log = await _log(url, task["contextId"])
        finally:
            await client.aclose()

    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    text, binary, link, data, answer = task["artifacts"]
    made = [e.data for e in log if e.type.value == "ARTIFACT"]
    assert [a["artifactId"] for a in task["artifacts"][:4]] == [m["artifact_id"] for m in made]
    assert text["name"] == "output.txt" and text["description"] == "the notes"
    assert text["parts"] == [{"raw": base64.b64encode("tck ✓".encode()).decode(), "filename": "output.txt",
                              "mediaType": "text/plain"}]
    assert binary["parts"] == [{"raw": "AAH/", "filename": "pixel.bin", "mediaType": "application/octet-stream"}]
    assert link["parts"] == [{"url": "https://example.com/output.txt", "filename": "output.txt",
                              "mediaType": "text/plain"}]
    assert data["parts"] == [{"data": {"key": "value", "count": 42}, "mediaType": "application/json"}]
    assert answer["artifactId"] == f"{task['id']}-answer" and answer["parts"] == [{"text": "Done."}]
    # GetTask and ListTasks read the same log: the same artifacts.
    assert got["artifacts"] == task["artifacts"] and listed[0]["artifacts"] == task["artifacts"]


@BINDINGS
async def test_the_stream_has_each_artifact_whole_in_one_update_at_its_seq(a2a_factory, rest: bool) -> None:
    async with a2a_factory(provider=ToolCallingModel(CALLS[:1] + CALLS[3:])) as url:
        client = A2AClient(url, rest=rest)
        try:
            method = "/message:stream" if rest else "SendStreamingMessage"
            events = await client.stream(method, _message("write it down", "m-stream"))
            task_id = events[0][1]["task"]["id"]
            log = await _log(url, events[0][1]["task"]["contextId"])
            got = await client.get(task_id)
        finally:
            await client.aclose()

    updates = [u["artifactUpdate"] for _, u in events[1:] if "artifactUpdate" in u]
    assert [(u["append"], u["lastChunk"]) for u in updates] == [(False, True), (False, True)]
    assert [u["metadata"]["seq"] for u in updates] == [e.seq for e in log if e.type.value == "ARTIFACT"]
    assert [u["artifact"] for u in updates] == got["artifacts"]  # no answer text: the artifacts alone
    assert events[-1][1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


@BINDINGS
async def test_a_direct_reply_is_a_message_to_a_client_that_waited_and_its_task_stays_readable(
    a2a_factory, tmp_path: Path, rest: bool,
) -> None:
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(REPLY_PROFILES)
    calls = [("create_file", {"name": "hi.txt", "content": "hi"}), ("reply", {"text": "Hello there!"})]
    async with a2a_factory(provider=ToolCallingModel(calls), profiles_file=profiles, a2a_profile="concierge") as url:
        client = A2AClient(url, rest=rest)
        try:
            reply = (await _send(client, _message("hello", "m-hello", contextId="ctx-hello")))["message"]
            task = await client.get(reply["taskId"])
            listed = await _list(client, "ctx-hello")
            later = (await _send(client, {**_message("hello again", "m-later"),
                                          "configuration": {"returnImmediately": True}}))
            method = "/message:stream" if rest else "SendStreamingMessage"
            streamed = await client.stream(method, _message("and again", "m-stream"))
        finally:
            await client.aclose()

    assert reply["role"] == "ROLE_AGENT" and reply["contextId"] == "ctx-hello"
    assert reply["parts"][0] == {"text": "Hello there!"}
    assert reply["parts"][1] == {"raw": "aGk=", "filename": "hi.txt", "mediaType": "text/plain"}
    # The run is durable: its task is COMPLETED, with the reply as its last status message.
    assert task["status"]["state"] == "TASK_STATE_COMPLETED" and task["status"]["message"] == reply
    assert [t["id"] for t in listed] == [reply["taskId"]]
    assert [a["parts"][0].get("text") for a in task["artifacts"]] == [None, "Hello there!"]
    # A client that did not wait, and a stream, follow the task: the reply is its final status.
    assert "task" in later
    final = streamed[-1][1]["statusUpdate"]["status"]
    assert "task" in streamed[0][1] and final["state"] == "TASK_STATE_COMPLETED"
    assert final["message"]["parts"][0] == {"text": "Hello there!"}
