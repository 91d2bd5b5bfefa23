"""The tool block hook refuses the listed tools to the listed organisations only."""

from __future__ import annotations

from agent_service.hooks.base import BeforeTool, RunInfo
from agent_service.hooks.tool_block import OrgToolBlockHook, parse_blocked


def _call(org: str | None, tool: str) -> BeforeTool:
    return BeforeTool(RunInfo("s1", "r1", "default", "u1", org), "c1", tool, {})


async def test_refuses_the_tool_for_that_organisation_only() -> None:
    hook = OrgToolBlockHook(parse_blocked(["acme:calculator", " globex : knowledge_search "]))
    blocked, other_org, other_tool, no_org = _call("acme", "calculator"), _call("initech", "calculator"), _call(
        "acme", "current_time"), _call(None, "calculator")
    for data in (blocked, other_org, other_tool, no_org):
        await hook.before_tool(data)
    assert blocked.refusal == "the tool calculator is disabled for organisation acme"
    assert other_org.refusal is None and other_tool.refusal is None and no_org.refusal is None
    globex = _call("globex", "knowledge_search")
    await hook.before_tool(globex)
    assert globex.refusal is not None
