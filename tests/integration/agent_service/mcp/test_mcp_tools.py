"""Tools of MCP servers in runs of the Agent Service, against the SDK's server over stdio and
Streamable HTTP, at 2026-07-28 and 2025-11-25."""

from __future__ import annotations

from tests.support.models import QuotingModel


async def test_a_run_calls_a_tool_of_an_mcp_server(agent_factory, ops_server, profiles_file) -> None:
    model = QuotingModel([("ops_add", {"a": 2, "b": 40})])
    async with agent_factory(provider=model, profiles_file=profiles_file, mcp_servers=[ops_server]) as agent:
        run = await agent.execute("add 2 and 40", body={"profile_name": "ops"})
    assert run.last.type.value == "COMPLETE", run.events
    end = run.of_type("TOOL_END")[0].data
    assert end["ok"] is True and end["tool"] == "ops_add"
    assert "42" in run.last.data["answer"]
