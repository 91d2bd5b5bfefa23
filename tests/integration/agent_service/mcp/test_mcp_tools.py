"""Tools of MCP servers in runs of the Agent Service, against the SDK's server over stdio and
Streamable HTTP, at 2026-07-28 and 2025-11-25: the tools as the model sees them, which of them a
profile offers, their results (text, structured content, an image as an ARTIFACT, an error the
model reads), the approval their annotations ask for, a listing that changes, and the audit log,
metrics and trace of a call."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Sequence

import orjson

from shared.llm.base import LLMEvent, LLMMessage, ToolSpec
from tests.integration.agent_service.mcp.conftest import stdio_server, until
from tests.support.mcp_server import PIXEL
from tests.support.models import CommandModel, QuotingModel
from tests.support.otlp_receiver import running_receiver


async def _call(agent, tool: str, arguments: dict | None = None, profile: str = "ops"):
    run = await agent.execute(f"call {tool} {json.dumps(arguments or {})}", body={"profile_name": profile})
    return run


async def test_a_run_calls_a_tool_of_an_mcp_server(agent_factory, ops_server, profiles_file) -> None:
    model = QuotingModel([("ops_add", {"a": 2, "b": 40})])
    async with agent_factory(provider=model, profiles_file=profiles_file, mcp_servers=[ops_server]) as agent:
        run = await agent.execute("add 2 and 40", body={"profile_name": "ops"})
    assert run.last.type.value == "COMPLETE", run.events
    assert [e.type.value for e in run.events[:2]] == ["TOOL_START", "TOOL_END"]
    end = run.of_type("TOOL_END")[0].data
    assert end["ok"] is True and end["tool"] == "ops_add" and end["result"] == {"result": 42}
    assert "42" in run.last.data["answer"]


class _Recording(CommandModel):
    """Remembers the tools each model call was offered."""

    def __init__(self) -> None:
        self.offered: list[list[ToolSpec]] = []

    async def reply(self, messages: Sequence[LLMMessage], tools: Sequence[ToolSpec]) -> AsyncIterator[LLMEvent]:
        self.offered.append(list(tools))
        async for event in super().reply(messages, tools):
            yield event


async def test_the_model_sees_the_tools_a_profile_allows_as_it_sees_built_in_ones(
    agent_factory, profiles_file, events,
) -> None:
    model = _Recording()
    async with agent_factory(provider=model, profiles_file=profiles_file, mcp_servers=[stdio_server(events)]) as agent:
        await agent.execute("hello", body={"profile_name": "ops"})
        await agent.execute("hello", body={"profile_name": "readonly"})
        denied = await _call(agent, "ops_wait", {"seconds": 1}, profile="readonly")
        profiles = {p["name"]: p for p in (await agent.http.get(
            "/api/v1/agent/profiles", headers=agent.headers())).json()}
    ops, readonly = ({spec.name: spec for spec in offered} for offered in model.offered[:2])
    assert {"calculator", "ops_add", "ops_echo", "ops_deploy", "ops_wait", "ops_weather", "ops_pixel"} <= set(ops)
    add = ops["ops_add"]
    assert add.description == "Add two numbers."
    assert add.parameters["type"] == "object" and set(add.parameters["required"]) == {"a", "b"}
    assert set(readonly) == {"ops_add", "ops_echo", "ops_weather"}, "allow add, echo, w*; deny wait"
    assert sorted(profiles["readonly"]["tools"]) == ["ops_add", "ops_echo", "ops_weather"]
    end = denied.of_type("TOOL_END")[0].data
    assert end["ok"] is False and "unknown tool 'ops_wait'" in end["error"]


async def test_results_structured_content_an_image_and_an_error(agent_factory, ops_server, profiles_file) -> None:
    async with agent_factory(provider=CommandModel(), profiles_file=profiles_file, mcp_servers=[ops_server]) as agent:
        weather = await _call(agent, "ops_weather", {"city": "Lisbon"})
        pixel = await _call(agent, "ops_pixel")
        failed = await _call(agent, "ops_fail", {"reason": "the ticket is closed"})
    assert weather.of_type("TOOL_END")[0].data["result"] == {
        "city": "Lisbon", "temperature_c": 21.5, "conditions": "sunny"}
    [artifact] = pixel.of_type("ARTIFACT")
    assert artifact.data["media_type"] == "image/png" and base64.b64decode(artifact.data["bytes"]) == PIXEL
    assert artifact.data["call_id"] == pixel.of_type("TOOL_END")[0].data["call_id"]
    receipt = pixel.of_type("TOOL_END")[0].data["result"]
    assert "handed to the user as the file" in receipt and "image/png" in receipt
    end = failed.of_type("TOOL_END")[0].data
    assert end["ok"] is False and "the ticket is closed" in end["error"]
    # The model read the error and answered: a failed tool is never a failed run.
    assert failed.last.type.value == "COMPLETE" and "the ticket is closed" in failed.last.data["answer"]


async def test_annotations_set_approval_and_idempotence_and_a_profile_overrides_them(
    agent_factory, profiles_file, events,
) -> None:
    async with agent_factory(provider=CommandModel(), profiles_file=profiles_file,
                             mcp_servers=[stdio_server(events)]) as agent:
        read_only = await _call(agent, "ops_add", {"a": 1, "b": 1})
        destructive = await _call(agent, "ops_deploy", {"service": "web"})
        asked_for_add = await _call(agent, "ops_add", {"a": 1, "b": 1}, profile="trusting")
        mcp = agent.app.state.agent.mcp
        idempotent = {name: mcp.get(name).idempotent for name in ("ops_add", "ops_deploy", "ops_wait")}
    assert read_only.last.type.value == "COMPLETE", "readOnlyHint: no approval"
    assert destructive.last.data["kind"] == "approval" and destructive.last.data["tool"] == "ops_deploy"
    assert asked_for_add.last.data["kind"] == "approval", "the profile asks for add"
    assert idempotent == {"ops_add": True, "ops_deploy": False, "ops_wait": True}


async def test_a_tool_the_server_adds_is_offered_once_it_says_its_tools_changed(
    agent_factory, ops_server, profiles_file,
) -> None:
    async with agent_factory(provider=CommandModel(), profiles_file=profiles_file, mcp_servers=[ops_server]) as agent:
        learned = await _call(agent, "ops_learn", {"name": "late"})
        assert learned.of_type("TOOL_END")[0].data["ok"] is True
        mcp = agent.app.state.agent.mcp
        await until(lambda: mcp.get("ops_late") is not None, what="the new tool to be listed")
        late = await _call(agent, "ops_late", {"text": "hello"})
    assert late.of_type("TOOL_END")[0].data["result"] == {"result": "hello"}


async def test_an_mcp_call_is_audited_counted_and_traced_with_its_server(
    agent_factory, profiles_file, events, tmp_path, monkeypatch,
) -> None:
    audit = tmp_path / "audit.jsonl"
    async with running_receiver() as (receiver, otlp_url):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_url)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        async with agent_factory(
            provider=CommandModel(), profiles_file=profiles_file, mcp_servers=[stdio_server(events)],
            hooks=["agent_service.hooks.audit:AuditLogHook"], audit_log=audit,
        ) as agent:
            await _call(agent, "ops_add", {"a": 1, "b": 2})
            await _call(agent, "ops_fail", {"reason": "no"})
            metrics = (await agent.http.get("/metrics")).text
            spans = await until(lambda: [s for s in receiver.spans if s.name == "execute_tool ops_add"],
                                what="the tool's span")
    records = [orjson.loads(line) for line in audit.read_text().splitlines()]
    after = [r for r in records if r["point"] == "after_tool"]
    assert [(r["server"], r["tool"], r["ok"]) for r in after] == [("ops", "ops_add", True), ("ops", "ops_fail", False)]
    assert after[0]["arguments"] == {"a": 1, "b": 2} and len(after[0]["arguments_sha256"]) == 64
    assert after[0]["duration_ms"] > 0
    assert 'agent_mcp_calls_total{outcome="ok",server="ops"} 1.0' in metrics
    assert 'agent_mcp_calls_total{outcome="error",server="ops"} 1.0' in metrics
    assert 'agent_mcp_call_duration_seconds_count{server="ops"} 2.0' in metrics
    assert spans[0].attributes["mcp.server.name"] == "ops"
    assert spans[0].attributes["gen_ai.tool.name"] == "ops_add"
