"""A stopped run cancels its MCP call in flight, and the server learns of it: ``notifications/cancelled``
(stdio, and HTTP at 2025-11-25), the request's stream closed (HTTP at 2026-07-28)."""

from __future__ import annotations

import asyncio

from tests.integration.agent_service.mcp.conftest import events_of, until
from tests.support.models import QuotingModel


async def test_cancelling_the_run_cancels_the_call_on_the_server(agent_factory, ops_server, profiles_file,
                                                                 events) -> None:
    model = QuotingModel([("ops_wait", {"seconds": 60})])
    async with agent_factory(provider=model, profiles_file=profiles_file, mcp_servers=[ops_server]) as agent:
        run = asyncio.create_task(agent.execute("wait a minute", body={"profile_name": "ops"}))
        started = await until(lambda: events_of(events, tool="wait", state="started"), what="the call to start")
        session = (await until(lambda: _session_of(agent), what="the session"))
        cancel = await agent.http.post(f"/api/v1/agent/sessions/{session}/cancel", headers=agent.headers())
        assert cancel.status_code == 200, cancel.text
        result = await asyncio.wait_for(run, 10)
        assert result.last.type.value == "ERROR" and result.last.data["code"] == "CANCELLED"
        cancelled = await until(lambda: events_of(events, tool="wait", state="cancelled"),
                                what="the server to see the cancel")
    assert [e["request_id"] for e in cancelled] == [e["request_id"] for e in started]
    assert events_of(events, tool="wait", state="finished") == []


async def _session_of(agent) -> str | None:
    manager = agent.app.state.agent.run_manager
    runs = manager.active()
    return runs[0].handle.session_id if runs else None
