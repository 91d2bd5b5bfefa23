"""The Agent Service as an MCP server (``/mcp``), driven by the official SDK's client at 2026-07-28 and
2025-11-25: the ``ask`` tool answers, streams its run's progress as progress notifications, asks the
agent's questions as MCP asks (``input_required``, elicitation) and takes the answer; a cancelled call
cancels its run. And its tenancy: the door takes the credentials every door takes (keys of named callers,
the identity provider's access tokens) and needs the ``mcp`` permission; a caller acts only for whom it may,
owns what it starts (another caller is told it does not exist), and neither an MCP session nor a
question's request state can be used by another caller.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from agent_service.app import create_app
from agent_service.settings import AgentOIDCSettings, AgentServiceSettings, CallerKeySettings
from shared.llm.base import LLMEvent, LLMMessage, TextDelta, ToolSpec
from shared.llm.builtin import BuiltinProvider
from tests.support.models import ScriptedModelBase
from tests.support.oidc_provider import (
    AGENT_AUDIENCE,
    AGENT_UI,
    ORG_CLAIM,
    PERMISSIONS_CLAIM,
    ProviderConfig,
    running_provider,
)
from tests.support.servers import serve_app

USERS = {"alice": {"password": "wonderland", "org": "acme"}, "carol": {"password": "christmas", "org": "acme"}}
KEYS = {"chat": "chat-key-0123456789", "reports": "reports-key-0123456789", "partner": "partner-key-0123456789",
        "no_mcp": "no-mcp-key-0123456789"}
ALICE = {"user_id": "alice", "org_id": "acme"}
REVISIONS = ["2026-07-28", "legacy"]


def _callers() -> list[CallerKeySettings]:
    def entry(name: str, **options: Any) -> CallerKeySettings:
        return CallerKeySettings(name=name, key_sha256=hashlib.sha256(KEYS[name].encode()).hexdigest(), **options)

    return [entry("chat", orgs=["acme"]), entry("reports", orgs=["globex"]),
            entry("partner", kind="agent", orgs=["acme"]), entry("no_mcp", permissions=["runs", "a2a", "memory"])]


@dataclass
class Door:
    url: str
    http: httpx.AsyncClient
    headers: dict[str, dict[str, str]]

    @asynccontextmanager
    async def client(self, who: str, mode: str = "2026-07-28", answers: list[Any] | None = None,
                     ) -> AsyncIterator[Client]:
        """The SDK's client as ``who``; it answers the server's questions with ``answers``, in turn."""
        pending = list(answers or [])

        async def elicit(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
            self.asked.append(params)
            return pending.pop(0)

        self.asked: list[types.ElicitRequestParams] = []
        async with httpx2.AsyncClient(headers=self.headers[who], timeout=30) as http, Client(
            streamable_http_client(f"{self.url}/mcp", http_client=http), mode=mode, elicitation_callback=elicit,
            cache=None,
        ) as client:
            yield client

    async def session(self, who: str, session_id: str) -> int:
        return (await self.http.get(f"/api/v1/agent/sessions/{session_id}", headers=self.headers[who])).status_code


@pytest.fixture(scope="module")
async def door(tmp_path_factory) -> AsyncIterator[Door]:
    tmp: Path = tmp_path_factory.mktemp("mcp-door")
    async with running_provider(tmp, ProviderConfig(users=USERS)) as provider:
        settings = AgentServiceSettings(
            database_url=f"sqlite+aiosqlite:///{tmp}/agent.db", migrate_on_start=True, knowledge_dir=tmp / "none",
            callers=_callers(), auth_oidc=AgentOIDCSettings(
                issuer=provider.issuer, audience=AGENT_AUDIENCE, org_claim=ORG_CLAIM, permissions_claim=PERMISSIONS_CLAIM,
            ),
        )
        app = create_app(settings, provider=BuiltinProvider(first_token_delay=0, chunk_delay=0))
        headers = {name: {"X-API-Key": key} for name, key in KEYS.items()} | {"none": {}}
        for user in USERS:
            tokens = await provider.user_tokens(user, AGENT_UI, scope="openid profile agent")
            headers[user] = {"Authorization": f"Bearer {tokens['access_token']}"}
        async with serve_app(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
            yield Door(url, http, headers)


def _text(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


@pytest.mark.parametrize("mode", REVISIONS)
async def test_ask_answers_with_its_progress_and_the_session_to_go_on_with(door: Door, mode: str) -> None:
    progress: list[tuple[float, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))

    async with door.client("chat", mode) as client:
        assert client.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
        [tool] = (await client.list_tools()).tools
        assert tool.name == "ask" and set(tool.input_schema["properties"]["profile"]["enum"]) >= {"default", "careful"}
        result = await client.call_tool("ask", {"message": "what is 17*23", **ALICE}, progress_callback=on_progress)
        again = await client.call_tool("ask", {"message": "and 2+2?", "session_id": result.structured_content[
            "session_id"], **ALICE})
    assert not result.is_error and "391" in _text(result)
    assert result.structured_content["answer"] == _text(result)
    messages = [message for _, message in progress]
    assert "calling calculator" in messages and "calculator done" in messages
    assert [value for value, _ in progress] == sorted(value for value, _ in progress), "progress only grows"
    assert "4" in _text(again) and again.structured_content["session_id"] == result.structured_content["session_id"]


async def test_the_agents_question_is_asked_as_input_required_and_the_answer_goes_on(door: Door) -> None:
    """2026-07-28: the SDK's client asks its user (the elicitation in ``input_required``) and retries."""
    answer = types.ElicitResult(action="accept", content={"answer": "Lisbon for 3 days"})
    async with door.client("chat", answers=[answer]) as client:
        result = await client.call_tool("ask", {"message": "plan a trip", **ALICE})
    assert not result.is_error and "Lisbon" in _text(result)
    [asked] = door.asked
    assert asked.message == "Where would you like to go, and for how many days?"
    assert asked.requested_schema["required"] == ["answer"]


async def test_an_approval_is_asked_as_a_yes_or_no(door: Door) -> None:
    yes, no = (types.ElicitResult(action="accept", content={"approved": True}),
               types.ElicitResult(action="decline"))
    async with door.client("chat", answers=[yes, no]) as client:
        approved = await client.call_tool("ask", {"message": "what is 17*23", "profile": "careful", **ALICE})
        refused = await client.call_tool("ask", {"message": "what is 6*7", "profile": "careful", **ALICE})
    assert "391" in _text(approved) and "42" not in _text(refused) and not refused.is_error
    assert door.asked[0].requested_schema["properties"] == {"approved": {"type": "boolean", "title": "Approve"}}
    assert "calculator" in door.asked[0].message


async def test_at_2025_11_25_the_question_is_the_result_and_the_next_ask_answers_it(door: Door) -> None:
    """Served without MCP sessions (any replica answers), a 2025-11-25 call cannot wait for an
    elicitation's answer: the question comes back with its session, and the answer with the next ask."""
    async with door.client("chat", "legacy", answers=[]) as client:
        asked = await client.call_tool("ask", {"message": "what is 17*23", "profile": "careful", **ALICE})
        question = asked.structured_content
        approved = await client.call_tool("ask", {"message": "yes", "profile": "careful",
                                                  "session_id": question["session_id"], **ALICE})
    assert question["kind"] == "approval" and question["tool"] == "calculator" and not door.asked
    assert "391" in _text(approved)


class _Endless(ScriptedModelBase):
    """A model that talks until it is stopped: a run that is still going when its call is cancelled."""

    async def reply(self, messages: Sequence[LLMMessage], tools: Sequence[ToolSpec]) -> AsyncIterator[LLMEvent]:
        while True:
            yield TextDelta("and so on ")
            await asyncio.sleep(0.02)


async def test_a_cancelled_call_cancels_its_run(tmp_path: Path) -> None:
    """At 2026-07-28 a call's cancellation is its stream closed, which reaches the call wherever it
    runs. (A 2025-11-25 cancel is a notification of its own, which a door without MCP sessions cannot
    tie to a call: the run then ends by itself, or through the session's cancel.)"""
    settings = AgentServiceSettings(database_url=f"sqlite+aiosqlite:///{tmp_path}/agent.db", migrate_on_start=True,
                                    knowledge_dir=tmp_path / "none", callers=_callers())
    app = create_app(settings, provider=_Endless())
    async with serve_app(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        door = Door(url, http, {"chat": {"X-API-Key": KEYS["chat"]}})
        async with door.client("chat") as client:
            call = asyncio.create_task(client.call_tool("ask", {"message": "talk", **ALICE}))
            runs = app.state.agent.run_manager
            await _until(lambda: runs.active(), "the run to start")
            session_id = runs.active()[0].handle.session_id
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call

            async def status() -> str:
                return (await door.http.get(f"/api/v1/agent/sessions/{session_id}",
                                            headers=door.headers["chat"])).json()["status"]

            await _until(lambda: status(), "the run to end", equals="CANCELLED")


async def _until(check: Any, what: str, equals: Any = None, timeout: float = 10.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if (value == equals) if equals is not None else bool(value):
            return value
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"timed out waiting for {what} (last: {value!r})")
        await asyncio.sleep(0.02)


# -- tenancy ------------------------------------------------------------------------------------------


async def test_the_door_takes_the_credentials_of_every_door_and_needs_the_mcp_permission(door: Door) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}}
    accept = {"Accept": "application/json, text/event-stream"}
    nobody = await door.http.post("/mcp", json=initialize, headers=accept)
    assert nobody.status_code == 401 and nobody.json()["error"] == "unauthorized"
    wrong_key = await door.http.post("/mcp", json=initialize, headers=accept | {"X-API-Key": "not-a-key"})
    assert wrong_key.status_code == 401
    refused = await door.http.post("/mcp", json=initialize, headers=accept | door.headers["no_mcp"])
    assert refused.status_code == 403 and refused.json()["error"] == "forbidden"
    for who in ("chat", "partner", "alice"):
        opened = await door.http.post("/mcp", json=initialize, headers=accept | door.headers[who])
        assert opened.status_code == 200, (who, opened.text)
    # Outside the OpenAPI document: MCP describes itself (tools/list).
    assert "/mcp" not in (await door.http.get("/openapi.json")).json()["paths"]


async def test_a_caller_acts_only_for_whom_it_may(door: Door) -> None:
    async with door.client("chat") as chat:
        nobody = await chat.call_tool("ask", {"message": "hello"})
    async with door.client("reports") as reports:
        other_org = await reports.call_tool("ask", {"message": "hello", **ALICE})
    async with door.client("carol") as carol:
        as_alice = await carol.call_tool("ask", {"message": "hello", **ALICE})
        as_herself = await carol.call_tool("ask", {"message": "what is 2+2"})
    async with door.client("partner") as partner:
        itself = await partner.call_tool("ask", {"message": "what is 2+2"})
    assert nobody.is_error and "a service names the user it acts for" in _text(nobody)
    assert other_org.is_error and "forbidden" in _text(other_org)
    assert as_alice.is_error and "forbidden" in _text(as_alice)
    assert not as_herself.is_error and not itself.is_error


async def test_what_a_caller_starts_is_its_own(door: Door) -> None:
    async with door.client("chat") as chat:
        started = await chat.call_tool("ask", {"message": "my name is Alice", **ALICE})
    session_id = started.structured_content["session_id"]
    seen = {who: await door.session(who, session_id) for who in ("chat", "alice", "carol", "reports", "partner")}
    assert seen == {"chat": 200, "alice": 200, "carol": 404, "reports": 404, "partner": 404}
    async with door.client("carol") as carol:
        taken = await carol.call_tool("ask", {"message": "what is my name?", "session_id": session_id})
    async with door.client("reports") as reports:
        taken_too = await reports.call_tool("ask", {"message": "what is my name?", "session_id": session_id,
                                                   "user_id": "dave", "org_id": "globex"})
    async with door.client("alice") as alice:
        hers = await alice.call_tool("ask", {"message": "what is my name?", "session_id": session_id})
    assert taken.is_error and "session_not_found" in _text(taken) and "Alice" not in _text(taken)
    assert taken_too.is_error and "session_not_found" in _text(taken_too)
    assert not hers.is_error and "Alice" in _text(hers)


async def test_a_questions_state_belongs_to_its_caller(door: Door) -> None:
    async with door.client("chat") as chat:
        asked = await chat.session.call_tool("ask", {"message": "plan a trip", **ALICE}, allow_input_required=True)
    assert isinstance(asked, types.InputRequiredResult) and asked.request_state
    answer = {"question": types.ElicitResult(action="accept", content={"answer": "Lisbon"})}
    async with door.client("reports") as reports:
        with pytest.raises(MCPError, match="Invalid or expired requestState"):
            await reports.session.call_tool("ask", {"message": "plan a trip", "user_id": "dave", "org_id": "globex"},
                                            input_responses=answer, request_state=asked.request_state,
                                            allow_input_required=True)
    async with door.client("chat") as chat:
        done = await chat.session.call_tool("ask", {"message": "plan a trip", **ALICE}, input_responses=answer,
                                            request_state=asked.request_state, allow_input_required=True)
    assert isinstance(done, types.CallToolResult) and "Lisbon" in _text(done)


@pytest.mark.parametrize("mode", REVISIONS)
async def test_a_client_that_cannot_ask_gets_the_question_and_answers_with_ask(door: Door, mode: str) -> None:
    async with httpx2.AsyncClient(headers=door.headers["chat"], timeout=30) as http, Client(
        streamable_http_client(f"{door.url}/mcp", http_client=http), mode=mode, cache=None,
    ) as client:  # no elicitation callback: no elicitation capability
        asked = await client.call_tool("ask", {"message": "plan a trip", **ALICE})
        question = asked.structured_content
        assert not asked.is_error and question["question"] == "Where would you like to go, and for how many days?"
        assert f"session_id {question['session_id']}" in _text(asked)
        done = await client.call_tool("ask", {"message": "Lisbon for 3 days", "session_id": question["session_id"],
                                              **ALICE})
    assert not done.is_error and "Lisbon" in _text(done)
