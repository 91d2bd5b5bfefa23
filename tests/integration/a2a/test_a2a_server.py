"""The A2A server against a real Agent Service on loopback, SQLite and PostgreSQL, both bindings.

The mapping (the task's answer is the text of its ANSWER_CHUNKs), the INPUT_REQUIRED round trip,
cancel, errors, and auth.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Sequence

import httpx
import orjson

from shared.llm.base import LLMDone, LLMEvent, LLMMessage, TextDelta, ToolSpec
from shared.protocol import EventType
from shared.sse import SSEDecoder, decode_envelope
from tests.integration.a2a.conftest import API_KEY, VERSION, A2AClient
from tests.support.models import ScriptedModelBase


async def _log(base_url: str, session_id: str) -> list:
    """The session's events through the Agent Service's own API."""
    async with httpx.AsyncClient(base_url=base_url, headers={"X-API-Key": API_KEY}, timeout=30.0) as http:
        resp = await http.get(f"/api/v1/agent/sessions/{session_id}/events")
        decoder = SSEDecoder()
        return [decode_envelope(event) for event in decoder.feed(resp.content)]


def _text(artifact: dict) -> str:
    return "".join(part.get("text", "") for part in artifact["parts"])


async def test_a_completed_task_holds_the_answer_its_chunks_streamed(client: A2AClient) -> None:
    task = await client.send("what is 17*23")

    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    events = await _log(client.base_url, task["contextId"])
    chunks = "".join(e.data["text"] for e in events if e.type is EventType.ANSWER_CHUNK)
    complete = next(e for e in events if e.type is EventType.COMPLETE)
    assert "391" in chunks
    assert [_text(a) for a in task["artifacts"]] == [chunks] == [complete.data["answer"]]
    assert task["metadata"]["seq"] == events[-1].seq
    assert task["id"] == complete.run_id  # the run a message started is the task


async def test_the_stream_is_the_task_then_its_events_in_order_each_with_its_seq(client: A2AClient) -> None:
    message = {"role": "ROLE_USER", "parts": [{"text": "what is 6*7"}], "messageId": "m-stream"}
    method = "/message:stream" if client.rest else "SendStreamingMessage"
    events = await client.stream(method, {"message": message})

    first, updates = events[0][1], [e for _, e in events[1:]]
    assert first["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    log = await _log(client.base_url, first["task"]["contextId"])
    seqs = [u[next(iter(u))]["metadata"]["seq"] for u in updates]
    assert seqs == sorted(seqs) and set(seqs) == {e.seq for e in log}
    streamed = "".join(u["artifactUpdate"]["artifact"]["parts"][0]["text"] for u in updates if "artifactUpdate" in u)
    assert streamed == next(e for e in log if e.type is EventType.COMPLETE).data["answer"]
    chunks = [u["artifactUpdate"] for u in updates if "artifactUpdate" in u]
    assert [c["append"] for c in chunks] == [False] + [True] * (len(chunks) - 1)
    assert [c["lastChunk"] for c in chunks] == [False] * (len(chunks) - 1) + [True]
    tools = [u["statusUpdate"]["status"] for u in updates if "statusUpdate" in u
             and u["statusUpdate"]["metadata"]["event"] in ("TOOL_START", "TOOL_END")]
    assert tools and all(s["state"] == "TASK_STATE_WORKING" for s in tools)
    assert updates[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    # The SSE id of each event's last frame is its seq: what Last-Event-ID resumes from.
    assert [seq for seq, _ in events if seq is not None] == [e.seq for e in log]


async def test_a_question_is_input_required_and_the_answer_continues_the_same_task(client: A2AClient) -> None:
    asked = await client.send("plan a trip")

    assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    question = asked["status"]["message"]
    assert question["role"] == "ROLE_AGENT" and question["parts"][0]["text"].strip()
    assert asked["history"] == [question]

    done = await client.send("Lisbon, for 3 days", taskId=asked["id"])

    assert (done["id"], done["contextId"]) == (asked["id"], asked["contextId"])
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "Lisbon" in _text(done["artifacts"][0])
    assert (await client.get(asked["id"]))["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_a_new_message_in_the_context_is_a_new_task_and_a_client_may_name_the_context(client: A2AClient) -> None:
    first = await client.send("what is 2*3", contextId="ctx-chosen-by-client")
    second = await client.send("and 4*5?", contextId="ctx-chosen-by-client")

    assert first["contextId"] == second["contextId"] == "ctx-chosen-by-client"
    assert first["id"] != second["id"]
    assert "20" in _text(second["artifacts"][0])
    if not client.rest:
        listed = (await client.call("ListTasks", {"contextId": "ctx-chosen-by-client", "pageSize": 1})).json()["result"]
        assert [t["id"] for t in listed["tasks"]] == [second["id"]] and "artifacts" not in listed["tasks"][0]
        assert listed["totalSize"] == 2 and listed["nextPageToken"]
        rest = (await client.call("ListTasks", {"contextId": "ctx-chosen-by-client",
                                                 "pageToken": listed["nextPageToken"]})).json()["result"]
        assert [t["id"] for t in rest["tasks"]] == [first["id"]] and rest["nextPageToken"] == ""


async def test_cancel_ends_a_waiting_task_canceled_and_then_it_takes_nothing(a2a_url: str) -> None:
    client = A2AClient(a2a_url)
    try:
        asked = await client.send("plan a trip")
        cancelled = (await client.call("CancelTask", {"id": asked["id"]})).json()["result"]

        assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
        assert (await client.error("CancelTask", {"id": asked["id"]}))["code"] == -32002
        message = {"role": "ROLE_USER", "parts": [{"text": "Rome"}], "messageId": "late", "taskId": asked["id"]}
        assert (await client.error("SendMessage", {"message": message}))["code"] == -32004
        assert (await client.error("SubscribeToTask", {"id": asked["id"]}))["code"] == -32004
    finally:
        await client.aclose()


async def test_errors_are_the_a2a_errors_of_each_binding(a2a_url: str) -> None:
    client = A2AClient(a2a_url)
    rest = A2AClient(a2a_url, rest=True)
    try:
        missing = await client.error("GetTask", {"id": "no-such-task"})
        assert missing["code"] == -32001 and missing["data"][0]["reason"] == "TASK_NOT_FOUND"
        resp = await rest.http.get("/a2a/v1/tasks/no-such-task")
        assert resp.status_code == 404 and resp.json()["error"]["details"][0]["reason"] == "TASK_NOT_FOUND"
        bad_file = {"role": "ROLE_USER", "messageId": "f", "parts": [{"raw": "not base64!", "mediaType": "text/plain"}]}
        assert (await client.error("SendMessage", {"message": bad_file}))["code"] == -32602
        assert (await client.error("SendMessage", {}))["code"] == -32602
        assert (await client.error("NoSuchMethod", {}))["code"] == -32601
        old = await client.http.post("/a2a/jsonrpc", headers={"A2A-Version": ""},
                                     json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}})
        assert old.json()["error"]["code"] == -32009
        resp = await rest.http.post("/a2a/v1/tasks/x/pushNotificationConfigs", json={"url": "https://x"})
        assert resp.status_code == 400 and resp.json()["error"]["details"][0]["reason"] == "PUSH_NOTIFICATION_NOT_SUPPORTED"
    finally:
        await client.aclose()
        await rest.aclose()


async def test_without_the_key_nothing_is_answered_and_the_card_says_which_key(a2a_url: str) -> None:
    async with httpx.AsyncClient(base_url=a2a_url, headers=VERSION) as http:
        rpc = await http.post("/a2a/jsonrpc", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask",
                                                     "params": {"id": "x"}})
        rest = await http.get("/a2a/v1/tasks/x", headers={"X-API-Key": "wrong"})
        card = await http.get("/.well-known/agent-card.json")

    assert rpc.status_code == 401 and rpc.json()["error"]["data"][0]["reason"] == "UNAUTHENTICATED"
    assert rest.status_code == 401
    assert card.status_code == 200 and "max-age" in card.headers["cache-control"] and card.headers["etag"]
    body = card.json()
    assert body["securitySchemes"]["apiKey"]["apiKeySecurityScheme"] == {
        "location": "header", "name": "X-API-Key", "description": body["securitySchemes"]["apiKey"][
            "apiKeySecurityScheme"]["description"],
    }
    assert body["securityRequirements"] == [{"schemes": {"apiKey": {"list": []}}}]
    assert {i["protocolBinding"] for i in body["supportedInterfaces"]} == {"JSONRPC", "HTTP+JSON"}
    assert {s["id"] for s in body["skills"]} == {"default", "researcher", "careful"}


class _EchoModel(ScriptedModelBase):
    """Answers with the user's last message as the model received it."""

    name = "echo"

    async def reply(self, messages: Sequence[LLMMessage], tools: Sequence[ToolSpec]) -> AsyncIterator[LLMEvent]:
        yield TextDelta(next(m.content for m in reversed(messages) if m.role == "user"))
        yield LLMDone(prompt_tokens=1, completion_tokens=1, finish_reason="stop")


async def test_files_of_the_accepted_types_reach_the_model_and_others_are_refused(a2a_factory) -> None:
    csv = base64.b64encode(b"city,days\nLisbon,3\n").decode()
    pdf = base64.b64encode(b"%PDF-1.7").decode()
    async with a2a_factory(provider=_EchoModel(), a2a_file_types=["text/*"]) as url:
        client, rest = A2AClient(url), A2AClient(url, rest=True)
        try:
            task = await client.send("Plan it:", parts=[
                {"text": "Plan it:"}, {"raw": csv, "mediaType": "text/csv", "filename": "trip.csv"},
            ])
            assert _text(task["artifacts"][0]) == (
                "Plan it:\n[The user attached trip.csv (text/csv, 19 bytes):]\ncity,days\nLisbon,3\n"
            )
            message = {"role": "ROLE_USER", "messageId": "p", "parts": [{"raw": pdf, "mediaType": "application/pdf"}]}
            refused = await client.error("SendMessage", {"message": message})
            assert refused["code"] == -32005 and "this agent takes text/*" in refused["message"]
            resp = await rest.http.post("/a2a/v1/message:send", json={"message": message | {"messageId": "p2"}})
            assert resp.status_code == 415
            card = (await client.http.get("/.well-known/agent-card.json")).json()
            assert card["defaultInputModes"] == ["text/plain", "application/json", "text/*"]
        finally:
            await client.aclose()
            await rest.aclose()


async def test_a_request_whose_id_is_not_a_scalar_is_invalid_and_runs_nothing(a2a_url: str) -> None:
    """JSON-RPC 2.0 4: an id is a string, a number or null. An object, array or boolean id is an Invalid
    Request (-32600), answered with id null, and the method is not run."""
    client = A2AClient(a2a_url)
    try:
        before = (await client.call("ListTasks", {})).json()["result"]["totalSize"]
        message = {"message": {"role": "ROLE_USER", "parts": [{"text": "what is 2+2"}], "messageId": "id-kinds"}}
        for request_id in ({"a": 1}, [1], True, False):
            answer = await client.http.post("/a2a/jsonrpc", json={
                "jsonrpc": "2.0", "id": request_id, "method": "SendMessage", "params": message,
            })
            assert answer.status_code == 200
            assert answer.json()["id"] is None and answer.json()["error"]["code"] == -32600, answer.text
        assert (await client.call("ListTasks", {})).json()["result"]["totalSize"] == before
        # The ids JSON-RPC allows are answered with themselves.
        for request_id in ("s-1", 7, None):
            answer = await client.http.post("/a2a/jsonrpc", json={
                "jsonrpc": "2.0", "id": request_id, "method": "GetTask", "params": {"id": "none"},
            })
            assert answer.json()["id"] == request_id and answer.json()["error"]["code"] == -32001
    finally:
        await client.aclose()


async def test_an_oversized_body_is_refused_in_each_bindings_format(a2a_factory) -> None:
    async with a2a_factory(max_body_bytes=2048) as url, httpx.AsyncClient(base_url=url, headers=VERSION | {
        "X-API-Key": API_KEY, "Content-Type": "application/json",
    }) as http:
        body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
            "role": "ROLE_USER", "parts": [{"text": "x" * 4000}], "messageId": "big"}}})
        rpc = await http.post("/a2a/jsonrpc", content=body)
        assert rpc.status_code == 413
        assert rpc.json() == {"jsonrpc": "2.0", "id": None, "error": {
            "code": -32600, "message": "request bodies are limited to 2048 bytes"}}
        rest = await http.post("/a2a/v1/message:send", content=body)
        assert rest.status_code == 413
        assert rest.json()["error"]["code"] == 413 and rest.json()["error"]["status"] == "INVALID_ARGUMENT"
        # A chunked body (no Content-Length) is counted as it comes and refused the same way.
        async def chunks():
            for _ in range(4):
                yield b" " * 1024
            yield body

        streamed = await http.post("/a2a/jsonrpc", content=chunks())
        assert streamed.status_code == 413 and streamed.json()["error"]["code"] == -32600
        # The service's own API keeps its ErrorBody.
        api = await http.post("/api/v1/agent/execute", content=body)
        assert api.status_code == 413 and api.json()["error"] == "payload_too_large"
