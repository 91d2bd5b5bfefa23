"""One chat message, one trace through both services: the services as real processes exporting OTLP
over HTTP to an in-test receiver (decoded with ``opentelemetry-proto``), the fake OpenAI-compatible
model on loopback.

A WebSocket ``message.send`` carrying a ``traceparent`` -> the message's span -> the turn -> the
Agent Service call -> the execute request -> the run -> its model calls (GenAI attributes, token
counts) and its tool call, and database statements of both services: one trace id, each span
under the right parent. The model server gets a ``traceparent`` of that trace; the reply's span
count does not grow with its token count; the turn's log lines carry the ids; the turn and run
durations name the trace in an exemplar; a turn taken over by a new process links to the trace of
its message.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from conversation_service.auth.tokens import issue_token
from tests.support.fake_openai import FakeOpenAI, Reply, TextReply, ToolCallReply, running_fake_openai
from tests.support.otlp_receiver import OTLPReceiver, ReceivedSpan, running_receiver
from tests.support.servers import ServiceProcess

SECRET = "tracing-secret-for-the-conversation-service-0123456789"
AGENT_KEY = "tracing-agent-key-0123456789"
MODEL = "fake-model"
SHORT, LONG = 8, 240  # answer tokens of the two replies compared


def _headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(SECRET, 'alice', 'acme', ttl_s=3600)}"}


def _script(body: dict[str, Any]) -> Reply:
    """A direct reply (no tools offered) answers at once. The agent first calls the calculator (or,
    asked to plan a trip, asks where to), then answers: as long as the user asked ("long" or not)."""
    messages = body["messages"]
    if not body.get("tools"):
        return TextReply(tokens=SHORT)
    if messages[-1]["role"] == "tool":
        asked = next(m["content"] for m in reversed(messages) if m["role"] == "user")
        return TextReply(tokens=LONG if "long" in asked else SHORT)
    if "trip" in messages[-1]["content"]:
        return ToolCallReply(calls=[("ask_user", {"question": "Where to?"})])
    return ToolCallReply(calls=[("calculator", {"expression": "17*23"})])


def _traceparent() -> tuple[str, str, str]:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


class Stack:
    def __init__(self, tmp_path: Path, receiver: OTLPReceiver, otlp_url: str, fake: FakeOpenAI, model_url: str) -> None:
        (tmp_path / "no-docs").mkdir(exist_ok=True)
        common = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_url, "OTEL_BSP_SCHEDULE_DELAY": "50",
            "LLM_PROVIDER": "openai", "LLM_BASE_URL": model_url, "LLM_API_KEY": "test-key", "LLM_MODEL": MODEL,
        }
        for name in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_SDK_DISABLED"):
            os.environ.pop(name, None)  # the processes inherit the environment: start them from a known one
        self.tmp_path, self.receiver, self.fake = tmp_path, receiver, fake
        self.agent = ServiceProcess("agent_service", {
            **common, "AGENT_SERVICE_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/agent.db",
            "AGENT_SERVICE_API_KEYS": AGENT_KEY, "AGENT_SERVICE_KNOWLEDGE_DIR": str(tmp_path / "no-docs"),
        })
        self.chat_env = {
            **common, "CONVERSATION_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/chat.db",
            "AGENT_SERVICE_API_KEY": AGENT_KEY, "AUTH_JWT_SECRET": SECRET, "TRACING_TRUST_CLIENT_CONTEXT": "true",
            "TURN_LEASE_S": "2", "TURN_SWEEP_INTERVAL_S": "0.3",
        }
        self.chat = ServiceProcess("conversation_service", self.chat_env)

    async def start(self) -> None:
        await self.agent.start(self.tmp_path)
        self.chat.env["AGENT_SERVICE_URL"] = self.agent.url
        await self.chat.start(self.tmp_path)

    async def stop(self) -> None:
        await self.chat.stop()
        await self.agent.stop()

    async def conversation(self) -> str:
        async with httpx.AsyncClient(timeout=30) as http:
            r = await http.post(f"{self.chat.url}/conversations", json={"title": "traced"}, headers=_headers())
            assert r.status_code == 201, r.text
            return r.json()["id"]

    async def send_over_websocket(self, cid: str, content: str, traceparent: str, *, until: str) -> list[dict]:
        """Send ``content`` as a ``message.send`` frame with ``traceparent``; the frames up to one of type ``until``."""
        url = self.chat.url.replace("http://", "ws://") + f"/conversations/{cid}/ws"
        frames: list[dict] = []
        async with websockets.connect(url, additional_headers=_headers()) as ws:
            await ws.send(json.dumps({"type": "message.send", "data": {"content": content, "traceparent": traceparent}}))
            async with asyncio.timeout(30):
                async for raw in ws:
                    frames.append(json.loads(raw))
                    if frames[-1]["type"] == until:
                        return frames
        raise AssertionError(f"no {until} frame: {[f['type'] for f in frames]}")

    async def spans_of(self, trace_id: str, *, until: Any, timeout: float = 15.0) -> list[ReceivedSpan]:
        """The trace's spans once ``until(spans)`` holds (exports are batched every 50 ms)."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.receiver.of_trace(trace_id)
            if until(spans) or time.monotonic() > deadline:
                return spans
            await asyncio.sleep(0.1)


@pytest.fixture(scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    """One stack for the module's tests (starting two services takes seconds); each test uses
    conversations and trace ids of its own."""
    tmp_path = tmp_path_factory.mktemp("tracing")
    fake = FakeOpenAI(script=_script, model=MODEL)
    async with running_receiver() as (receiver, otlp_url), running_fake_openai(fake) as (_, model_url):
        stack = Stack(tmp_path, receiver, otlp_url, fake, model_url)
        await stack.start()
        try:
            yield stack
        finally:
            await stack.stop()


def _one(spans: list[ReceivedSpan], service: str, name: str) -> ReceivedSpan:
    found = [s for s in spans if s.service == service and s.name == name]
    assert len(found) == 1, (service, name, sorted((s.service, s.name) for s in spans))
    return found[0]


def _complete(spans: list[ReceivedSpan]) -> bool:
    names = {(s.service, s.name) for s in spans}
    return {("conversation_service", "chat turn"), ("agent_service", "invoke_agent default")} <= names


async def test_one_websocket_message_is_one_trace_through_both_services(stack: Stack) -> None:
    cid = await stack.conversation()
    traceparent, trace_id, client_span = _traceparent()
    frames = await stack.send_over_websocket(cid, "/agent what is 17*23", traceparent, until="message.completed")
    assert frames[-1]["data"]["status"] == "complete"
    spans = await stack.spans_of(trace_id, until=_complete)
    receiver = stack.receiver
    assert {s.service for s in spans} == {"conversation_service", "agent_service"}

    # The chat: the message under the client's span, the turn under the message, the execute call under the turn.
    message = _one(spans, "conversation_service", "WS message.send")
    assert message.parent_span_id == client_span and message.kind == "SERVER"
    handshake = [s for s in receiver.spans if s.name == "WS /conversations/{conversation_id}/ws"]
    assert handshake and message.links[0] == (handshake[0].trace_id, handshake[0].span_id)
    assert handshake[0].trace_id != trace_id  # the connection is not the message's trace
    turn = _one(spans, "conversation_service", "chat turn")
    assert turn.parent_span_id == message.span_id
    call = next(s for s in spans if s.service == "conversation_service" and s.kind == "CLIENT"
                and s.attributes.get("url.full", "").endswith("/api/v1/agent/execute"))
    assert turn in receiver.ancestors(call)

    # The Agent Service: the execute request under the chat's call, the run under the request (it outlives it).
    execute = _one(spans, "agent_service", "POST /api/v1/agent/execute")
    assert execute.parent_span_id == call.span_id and execute.kind == "SERVER"
    assert execute.attributes["taskforce.stream.events"] >= 4  # one span for the whole SSE stream
    run = _one(spans, "agent_service", "invoke_agent default")
    assert run.parent_span_id == execute.span_id
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent" and run.attributes["taskforce.run.outcome"] == "complete"
    # The GenAI conventions' required attributes of invoke_agent: who serves the model, and which model.
    assert run.attributes["gen_ai.provider.name"] == "openai" and run.attributes["gen_ai.request.model"] == MODEL
    async with httpx.AsyncClient(timeout=10) as http:
        linked = await http.get(f"{stack.chat.url}/conversations/{cid}/agent-session", headers=_headers())
    session_id = linked.json()["agent_session_id"]
    assert session_id and run.attributes["gen_ai.conversation.id"] == session_id

    # Each model call: GenAI attributes and token counts; the tool call; both under the run.
    model_calls = [s for s in spans if s.name == f"chat {MODEL}" and s.service == "agent_service"]
    assert len(model_calls) == 2 and all(s.parent_span_id == run.span_id for s in model_calls)
    for span in model_calls:
        assert span.kind == "CLIENT"
        assert span.attributes["gen_ai.operation.name"] == "chat"
        assert span.attributes["gen_ai.provider.name"] == "openai"
        assert span.attributes["gen_ai.request.model"] == MODEL and span.attributes["gen_ai.response.model"] == MODEL
        assert span.attributes["gen_ai.usage.input_tokens"] == 11 and span.attributes["gen_ai.usage.output_tokens"] > 0
        assert "gen_ai.input.messages" not in span.attributes  # no prompt text unless turned on
        assert span.attributes["gen_ai.request.stream"] is True
        assert span.attributes["gen_ai.conversation.id"] == session_id  # the run's, as on invoke_agent
        assert 0 < span.attributes["gen_ai.response.time_to_first_chunk"] < 30  # seconds, not milliseconds
        assert not [name for name in span.attributes if name.startswith("taskforce.stream.first")]
    assert sorted(s.attributes["gen_ai.response.finish_reasons"][0] for s in model_calls) == ["stop", "tool_calls"]
    tool = _one(spans, "agent_service", "execute_tool calculator")
    assert tool.parent_span_id == run.span_id and tool.attributes["gen_ai.tool.call.id"] == "call_fake_0"

    # Database statements of both services, in the trace.
    for service in ("conversation_service", "agent_service"):
        statements = [s for s in spans if s.service == service and "db.system.name" in s.attributes]
        assert statements, f"no database span of the {service}"
        assert all(s.attributes["db.system.name"] == "sqlite" for s in statements)

    # The model server got this trace's context, naming the HTTP call under a model span.
    sent = [r.traceparent for r in stack.fake.requests]
    assert len(sent) == 2 and all(tp and tp.split("-")[1] == trace_id for tp in sent)
    for tp in sent:
        http_call = receiver.by_id(tp.split("-")[2])
        assert http_call is not None and http_call.kind == "CLIENT"
        assert receiver.by_id(http_call.parent_span_id) in model_calls

    # Background loops (group commits, lease renewals, sweeps, the chat's health polls of the Agent
    # Service) made no trace of their own: every root is a request, a message or a handshake.
    roots = [s for s in receiver.spans if not s.parent_span_id]
    assert roots and all(s.kind == "SERVER" for s in roots), sorted({(s.service, s.name) for s in roots})

    # Log lines written inside the trace carry its ids.
    await asyncio.sleep(0.2)
    for process, what in ((stack.chat, "message accepted"), (stack.agent, "run started")):
        lines = [json.loads(line) for line in process.logs().splitlines() if line.startswith("{")]
        traced = [line for line in lines if line.get("trace_id") == trace_id]
        assert any(line["msg"] == what for line in traced), what
        assert all(len(line["span_id"]) == 16 for line in traced)

    # Exemplars name the trace of the turn and of the run (OpenMetrics output).
    async with httpx.AsyncClient(timeout=10) as http:
        for url, metric in ((stack.chat.url, "conversation_turn_duration_seconds_bucket"),
                            (stack.agent.url, "agent_run_duration_seconds_bucket")):
            answer = await http.get(f"{url}/metrics", headers={"Accept": "application/openmetrics-text"})
            assert answer.headers["content-type"].startswith("application/openmetrics-text")
            assert any(line.startswith(metric) and f'trace_id="{trace_id}"' in line for line in answer.text.splitlines())
            plain = await http.get(f"{url}/metrics")
            assert plain.headers["content-type"].startswith("text/plain") and "trace_id" not in plain.text


async def test_a_direct_reply_posted_over_rest_is_one_trace_down_to_the_model_server(stack: Stack) -> None:
    cid = await stack.conversation()
    traceparent, trace_id, client_span = _traceparent()
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(f"{stack.chat.url}/conversations/{cid}/messages", json={"content": "hello there"},
                            headers={**_headers(), "traceparent": traceparent})
        assert r.status_code == 202 and r.json()["route"]["target"] == "direct_llm", r.text
    spans = await stack.spans_of(trace_id, until=lambda spans: any(s.name == "chat turn" for s in spans)
                                 and any(s.name == f"chat {MODEL}" for s in spans))
    post = _one(spans, "conversation_service", "POST /conversations/{conversation_id}/messages")
    assert post.parent_span_id == client_span and post.attributes["http.response.status_code"] == 202
    turn = _one(spans, "conversation_service", "chat turn")
    assert turn.parent_span_id == post.span_id
    model = _one(spans, "conversation_service", f"chat {MODEL}")
    assert turn in stack.receiver.ancestors(model) and model.attributes["gen_ai.usage.output_tokens"] == SHORT
    assert model.attributes["gen_ai.conversation.id"] == cid and model.attributes["gen_ai.request.stream"] is True
    assert model.attributes["gen_ai.response.time_to_first_chunk"] > 0
    assert {s.service for s in spans} == {"conversation_service"}  # the direct path: no agent
    sent = [r.traceparent for r in stack.fake.requests if r.traceparent and r.traceparent.split("-")[1] == trace_id]
    assert len(sent) == 1


async def test_the_answer_to_a_question_resumes_the_run_in_a_trace_linked_to_the_question(stack: Stack) -> None:
    cid = await stack.conversation()
    asked_tp, asked_trace, _ = _traceparent()
    frames = await stack.send_over_websocket(cid, "/agent plan a trip", asked_tp, until="agent.ask_user")
    question_run = await _until_span(stack, lambda s: s.trace_id == asked_trace and s.name == "invoke_agent default"
                                     and s.attributes.get("taskforce.run.outcome") == "ask_user")
    answer_tp, answer_trace, _ = _traceparent()
    await stack.send_over_websocket(cid, "Lisbon", answer_tp, until="message.completed")
    resumed = await _until_span(stack, lambda s: s.trace_id == answer_trace and s.name == "invoke_agent default")
    # The run's row keeps the context it was started in: the execute request the question's run ran under.
    assert resumed.links == [(asked_trace, question_run.parent_span_id)], frames[-1]
    assert resumed.attributes["taskforce.run.outcome"] == "complete"


async def test_the_span_count_of_a_reply_does_not_grow_with_its_tokens(stack: Stack) -> None:
    counts = {}
    for content, tokens in (("/agent what is 17*23", SHORT), ("/agent what is 17*23, a long answer please", LONG)):
        cid = await stack.conversation()
        traceparent, trace_id, _ = _traceparent()
        await stack.send_over_websocket(cid, content, traceparent, until="message.completed")
        spans = await stack.spans_of(trace_id, until=_complete)
        answered = [s.attributes.get("gen_ai.usage.output_tokens") for s in spans if s.name == f"chat {MODEL}"]
        assert tokens in answered  # the answer streamed this many tokens
        await asyncio.sleep(0.5)  # the last batches of both services
        counts[tokens] = len(stack.receiver.of_trace(trace_id))
    # 30 times the tokens; a span per chunk would add hundreds. Equal but for a statement or two that
    # timing decides (a write the reply's first frame starts early, a seq block reserved).
    print("spans per reply, by answer tokens:", counts)
    assert counts[LONG] <= counts[SHORT] + 2, counts


async def test_a_turn_taken_over_by_another_process_links_to_the_trace_of_its_message(stack: Stack) -> None:
    stack.fake.token_delay_ms = 20  # slow enough that the chat dies mid-reply
    try:
        await _take_over(stack)
    finally:
        stack.fake.token_delay_ms = 0


async def _take_over(stack: Stack) -> None:
    cid = await stack.conversation()
    traceparent, trace_id, _ = _traceparent()
    await stack.send_over_websocket(cid, "/agent what is 17*23, a long answer please", traceparent,
                                    until="message.delta")
    await stack.chat.stop(kill=True)
    stack.chat = ServiceProcess("conversation_service", stack.chat.env, port=stack.chat.port)
    await stack.chat.start(stack.tmp_path)

    def taken_over(spans: list[ReceivedSpan]) -> bool:
        return any(s.name == "chat turn takeover" for s in spans)

    deadline = time.monotonic() + 30
    while not any(taken_over([s]) for s in stack.receiver.spans) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    takeover = next(s for s in stack.receiver.spans if s.name == "chat turn takeover")
    assert takeover.trace_id != trace_id  # the sweep's own trace ...
    assert [link[0] for link in takeover.links] == [trace_id]  # ... linked to the message's
    turn = await _until_span(stack, lambda s: s.name == "chat turn" and s.parent_span_id == takeover.span_id)
    assert turn.attributes["taskforce.turn.takeover"] is True and turn.links[0][0] == trace_id


async def _until_span(stack: Stack, predicate: Any, timeout: float = 30.0) -> ReceivedSpan:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = next((s for s in stack.receiver.spans if predicate(s)), None)
        if found is not None:
            return found
        await asyncio.sleep(0.2)
    raise AssertionError("no such span")
