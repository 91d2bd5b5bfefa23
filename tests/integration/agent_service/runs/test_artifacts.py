"""Artifacts on the Agent Service's own API (SQLite and PostgreSQL): what a tool makes for the user
is an ARTIFACT event between the call's TOOL_START and TOOL_END, in the durable log like any event
(replayed after a Last-Event-ID), and the model reads a receipt of it, not its content."""

from __future__ import annotations

import base64

from shared.protocol import ArtifactData, EventType
from tests.integration.agent_service.conftest import assert_contiguous
from tests.support.models import ToolCallingModel

PNG = bytes.fromhex("89504e470d0a1a0a") + bytes(range(64))
CALLS = [
    ("create_file", {"name": "trip.md", "content": "# Lisbon\n3 days"}),
    ("create_file", {"name": "pixel.png", "content": base64.b64encode(PNG).decode(), "encoding": "base64"}),
    ("share_link", {"url": "https://example.com/guide.pdf"}),
    ("emit_data", {"data": {"city": "Lisbon", "days": 3}, "name": "plan.json"}),
]


async def test_each_artifact_is_an_event_of_its_call_and_the_log_replays_it(agent_factory) -> None:
    async with agent_factory(provider=ToolCallingModel(CALLS, ["Here ", "they are."])) as agent:
        run = await agent.execute("plan a trip and write it down")
        replayed = await agent.replay(run.events[0].session_id, last_event_id=run.events[0].seq)

    assert run.status == 200
    assert_contiguous(run.events)
    types = [e.type for e in run.events]
    assert types == [EventType.TOOL_START, EventType.ARTIFACT, EventType.TOOL_END] * 4 + [
        EventType.ANSWER_CHUNK, EventType.ANSWER_CHUNK, EventType.COMPLETE,
    ]
    artifacts = [ArtifactData.model_validate(e.data) for e in run.of_type("ARTIFACT")]
    starts, ends = run.of_type("TOOL_START"), run.of_type("TOOL_END")
    assert [a.call_id for a in artifacts] == [s.data["call_id"] for s in starts] == [e.data["call_id"] for e in ends]
    text, png, link, data = artifacts
    assert (text.name, text.media_type, text.text) == ("trip.md", "text/markdown", "# Lisbon\n3 days")
    assert (png.name, png.media_type, base64.b64decode(png.bytes or "")) == ("pixel.png", "image/png", PNG)
    assert (link.name, link.media_type, link.url) == ("guide.pdf", "application/pdf", "https://example.com/guide.pdf")
    assert (data.name, data.media_type, data.data) == ("plan.json", "application/json", {"city": "Lisbon", "days": 3})
    # The model (and TOOL_END) read a receipt naming the artifact, never the content again.
    assert [e.data["result"]["artifact_id"] for e in ends] == [a.artifact_id for a in artifacts]
    assert ends[1].data["result"]["size"] == len(PNG) and "content" not in ends[1].data["result"]
    assert run.last.data["answer"] == "Here they are." and "direct" not in run.last.data
    # From the durable log, after the first event: the same events, the artifacts as they were.
    assert [(e.seq, e.type, e.data) for e in replayed.events] == [(e.seq, e.type, e.data) for e in run.events[1:]]


async def test_a_file_over_the_limit_is_a_tool_error_the_model_reads_and_no_artifact(agent_factory) -> None:
    big = [("create_file", {"name": "big.txt", "content": "x" * 1025})]
    async with agent_factory(provider=ToolCallingModel(big, ["Too big."]), artifact_max_bytes=1024) as agent:
        run = await agent.execute("write a big file")

    assert not run.of_type("ARTIFACT")
    end = run.of_type("TOOL_END")[0].data
    assert end["ok"] is False and "at most 1024 bytes" in end["error"]
    assert run.last.type is EventType.COMPLETE
