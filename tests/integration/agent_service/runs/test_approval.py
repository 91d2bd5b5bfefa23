"""Tools a profile marks as approval_required wait for the user's decision (ASK_USER kind approval)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("decision", [{"approved": True}, {"text": "yes"}, {"approved": False}, {"text": "no way"}])
async def test_approval_required_tool(agent, db, decision: dict) -> None:
    asked = await agent.execute("what is 17*23", body={"profile_name": "careful"})
    ask = asked.last
    assert ask.type.value == "ASK_USER"
    assert ask.data["kind"] == "approval" and ask.data["tool"] == "calculator"
    assert ask.data["args"] == {"expression": "17*23"}
    assert not asked.of_type("TOOL_START"), "nothing runs before the decision"

    resumed = await agent.execute(
        body={"session_id": ask.session_id, "answer": {"question_id": ask.data["question_id"], **decision}}
    )
    assert resumed.last.type.value == "COMPLETE"
    approved = decision.get("approved", decision.get("text") == "yes")
    if approved:
        assert [e.data["tool"] for e in resumed.of_type("TOOL_START")] == ["calculator"]
        assert "391" in resumed.last.data["answer"]
    else:
        assert not resumed.of_type("TOOL_START")
        assert "391" not in resumed.last.data["answer"]
    assert await db.runs(ask.session_id) == 2
