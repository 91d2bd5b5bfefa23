"""The shipped hooks, configured by settings on a real service: a tool blocked for one organisation,
and an audit line for every hook call of every run."""

from __future__ import annotations

from pathlib import Path

import orjson

HOOKS = ["agent_service.hooks.tool_block:OrgToolBlockHook", "agent_service.hooks.audit:AuditLogHook"]


async def test_a_tool_blocked_for_one_organisation_and_every_call_audited(agent_factory, tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    async with agent_factory(hooks=HOOKS, audit_log=audit, blocked_tools=["o-1:calculator"]) as agent:
        blocked = await agent.execute("what is 17*23")
        other = await agent.execute(
            "what is 17*23", body={"user_context": {"user_id": "u-2", "org_id": "o-2"}}
        )
    assert blocked.last.type.value == "COMPLETE"
    [end] = blocked.of_type("TOOL_END")
    assert end.data["ok"] is False and end.data["error"] == "the tool calculator is disabled for organisation o-1"
    assert "391" not in blocked.last.data["answer"]
    assert other.last.type.value == "COMPLETE" and "391" in other.last.data["answer"]
    assert other.of_type("TOOL_END")[0].data["ok"] is True

    lines = [orjson.loads(line) for line in audit.read_bytes().splitlines()]
    by_user = {user: [line for line in lines if line["user"] == user] for user in ("u-1", "u-2")}
    assert [line["org"] for line in by_user["u-2"]] == ["o-2"] * len(by_user["u-2"])
    tools = [line for line in by_user["u-1"] if line["point"] == "after_tool"]
    assert tools[0]["tool"] == "calculator" and tools[0]["arguments"] == {"expression": "17*23"}
    assert tools[0]["ok"] is False and "duration_ms" in tools[0]
    for user in ("u-1", "u-2"):
        points = [line["point"] for line in by_user[user]]
        assert points[0] == "run_start" and points[-1] == "run_end"
        assert {"before_model_call", "after_model_call", "before_tool", "after_tool", "answer_chunk"} <= set(points)
