"""The agent's MCP client against the protocol's reference server, ``@modelcontextprotocol/server-everything``
from npm (pinned by ``tests/mcp_everything/package-lock.json``), over stdio and Streamable HTTP: its
tools offered and called (text, an image, structured content), and its elicitation, a form of
several fields, answered by the user on the API."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.mcp_everything import running_http, stdio_config
from tests.support.models import CommandModel

PROFILES = """
profiles:
  - name: everything
    system_prompt: You try every tool.
    tools: []
    mcp:
      - server: everything
        deny: ["toggle-*", "get-env"]
"""


@pytest.fixture(params=["stdio", "http"])
async def everything(request, tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    if request.param == "stdio":
        yield stdio_config()
    else:
        async with running_http(tmp_path) as url:
            yield {"name": "everything", "url": url}


async def _call(agent, tool: str, arguments: dict | None = None):
    return await agent.execute(f"call {tool} {json.dumps(arguments or {})}", body={"profile_name": "everything"})


async def test_the_reference_servers_tools_are_offered_and_called(agent_factory, everything, tmp_path) -> None:
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(PROFILES)
    async with agent_factory(provider=CommandModel(), profiles_file=profiles, mcp_servers=[everything]) as agent:
        offered = set(next(p for p in (await agent.http.get("/api/v1/agent/profiles", headers=agent.headers())).json()
                           if p["name"] == "everything")["tools"])
        echo = await _call(agent, "everything_echo", {"message": "hello"})
        total = await _call(agent, "everything_get-sum", {"a": 2, "b": 40})
        image = await _call(agent, "everything_get-tiny-image")
        weather = await _call(agent, "everything_get-structured-content", {"location": "New York"})
        health = (await agent.http.get("/ready")).json()["mcp_servers"]["everything"]
    assert {"everything_echo", "everything_get-sum", "everything_get-tiny-image",
            "everything_trigger-elicitation-request"} <= offered
    assert not {"everything_get-env", "everything_toggle-simulated-logging"} & offered
    assert echo.of_type("TOOL_END")[0].data["result"] == "Echo: hello"
    assert "42" in total.of_type("TOOL_END")[0].data["result"]
    [artifact] = image.of_type("ARTIFACT")
    assert artifact.data["media_type"] == "image/png" and base64.b64decode(artifact.data["bytes"]).startswith(b"\x89PNG")
    assert set(weather.of_type("TOOL_END")[0].data["result"]) == {"temperature", "conditions", "humidity"}
    assert health["state"] == "ready" and health["protocol"] == "2025-11-25"


async def test_the_reference_servers_elicitation_is_answered_by_the_user(agent_factory, everything, tmp_path) -> None:
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(PROFILES)
    async with agent_factory(provider=CommandModel(), profiles_file=profiles, mcp_servers=[everything]) as agent:
        approval = (await _call(agent, "everything_trigger-elicitation-request")).last
        assert approval.data["kind"] == "approval", "readOnlyHint false: the user approves first"
        asked = await agent.execute(body={"profile_name": "everything", "session_id": approval.session_id,
                                          "answer": {"question_id": approval.data["question_id"], "approved": True}})
        question = asked.last
        assert question.type.value == "ASK_USER" and question.data["kind"] == "question", asked.events
        text = question.data["question"]
        assert "Please provide inputs for the following fields" in text and "- name (text, required)" in text
        done = await agent.execute(body={
            "profile_name": "everything", "session_id": question.session_id,
            "answer": {"question_id": question.data["question_id"],
                       "text": "name: Ada Lovelace\ncheck: yes\nuntitledSingleSelectEnum: Rachel"},
        })
    assert done.last.type.value == "COMPLETE", done.events
    result = done.of_type("TOOL_END")[0].data
    assert result["ok"] is True, result
    assert "Ada Lovelace" in str(result["result"]) and "Rachel" in str(result["result"])
