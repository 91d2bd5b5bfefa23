"""The user in the loop of an MCP tool: the approval its annotations ask for, and a question its
server asks mid-call (2026-07-28 ``input_required``, 2025-11-25 elicitation) as ASK_USER, answered
on the API: the answer reaches the server and the call completes."""

from __future__ import annotations

from tests.integration.agent_service.mcp.conftest import events_of
from tests.support.models import QuotingModel

DEPLOY = [("ops_deploy", {"service": "web"})]


async def _answer(agent, ask, **answer):
    return await agent.execute(body={
        "profile_name": "ops", "session_id": ask.session_id,
        "answer": {"question_id": ask.data["question_id"], **answer},
    })


async def test_a_changing_tool_asks_approval_then_its_server_asks_and_the_answer_completes_the_call(
    agent_factory, ops_server, profiles_file, events,
) -> None:
    async with agent_factory(provider=QuotingModel(DEPLOY), profiles_file=profiles_file,
                             mcp_servers=[ops_server]) as agent:
        asked = await agent.execute("deploy web", body={"profile_name": "ops"})
        approval = asked.last
        assert approval.type.value == "ASK_USER", asked.events
        assert approval.data["kind"] == "approval" and approval.data["tool"] == "ops_deploy"
        assert approval.data["args"] == {"service": "web"}
        assert not asked.of_type("TOOL_START")

        approved = await _answer(agent, approval, approved=True)
        question = approved.last
        assert question.type.value == "ASK_USER", approved.events
        assert question.data["kind"] == "question" and question.data["tool"] == "ops_deploy"
        assert "Which environment" in question.data["question"]
        assert [e.data["tool"] for e in approved.of_type("TOOL_START")] == ["ops_deploy"]
        assert not approved.of_type("TOOL_END"), "the call is still under way"
        assert events_of(events, tool="deploy") == []

        done = await _answer(agent, question, text="staging")
    assert done.last.type.value == "COMPLETE", done.events
    end = done.of_type("TOOL_END")[0].data
    assert end["ok"] is True and end["tool"] == "ops_deploy"
    assert "deployed web to staging" in done.last.data["answer"]
    assert [(e["service"], e["environment"]) for e in events_of(events, tool="deploy")] == [("web", "staging")]


async def test_a_declined_question_fails_the_call_and_the_run_answers(agent_factory, ops_server, profiles_file,
                                                                      events) -> None:
    async with agent_factory(provider=QuotingModel(DEPLOY), profiles_file=profiles_file,
                             mcp_servers=[ops_server]) as agent:
        asked = await agent.execute("deploy web", body={"profile_name": "trusting"})
        question = asked.last
        assert question.data["kind"] == "question", "trusting runs deploy without approval"
        declined = await _answer(agent, question, approved=False)
    assert declined.last.type.value == "COMPLETE", declined.events
    end = declined.of_type("TOOL_END")[0].data
    assert end["ok"] is False and end["error"]
    assert events_of(events, tool="deploy") == []
