"""The user in the loop of an MCP tool: the approval its annotations ask for, and a question its
server asks mid-call (2026-07-28 ``input_required``, 2025-11-25 elicitation) as ASK_USER, answered
on the API: the answer reaches the server and the call completes."""

from __future__ import annotations

from agent_service.models import AgentSession
from tests.integration.agent_service.mcp.conftest import events_of, http_server, stdio_server
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


async def test_at_2026_07_28_the_question_travels_in_the_paused_run_and_another_process_completes_it(
    agent_factory, profiles_file, events, db,
) -> None:
    """The server's requestState is kept with the paused run (the database): the answer may reach
    another process (a replica, or this one restarted), which makes the call again with it."""
    async with http_server(events) as url:
        server = {"name": "ops", "url": url}
        async with agent_factory(provider=QuotingModel(DEPLOY), profiles_file=profiles_file,
                                 mcp_servers=[server]) as first:
            question = (await first.execute("deploy web", body={"profile_name": "trusting"})).last
            assert question.data["kind"] == "question"
        async with db.sessionmaker() as session:
            stored = (await session.get(AgentSession, question.session_id)).run_state
        assert stored["tool_input"]["state"]["request_state"], "the server's state is with the run"
        async with agent_factory(provider=QuotingModel(DEPLOY), profiles_file=profiles_file,
                                 mcp_servers=[server]) as second:
            done = await _answer(second, question, text="production")
    assert done.last.type.value == "COMPLETE", done.events
    assert "deployed web to production" in done.last.data["answer"]
    assert [e["environment"] for e in events_of(events, tool="deploy")] == ["production"]


async def test_at_2025_11_25_an_answer_that_reaches_another_process_is_told_the_call_is_lost(
    agent_factory, profiles_file, events,
) -> None:
    """A 2025-11-25 server keeps the call open while it asks: only the process holding it can take
    the answer. Another one says so, and that the call's outcome is unknown (the model reads it)."""
    server = stdio_server(events, legacy=True)
    async with agent_factory(provider=QuotingModel(DEPLOY), profiles_file=profiles_file,
                             mcp_servers=[server]) as first:
        question = (await first.execute("deploy web", body={"profile_name": "trusting"})).last
        assert question.data["kind"] == "question"
    async with agent_factory(provider=QuotingModel(DEPLOY), profiles_file=profiles_file,
                             mcp_servers=[server]) as second:
        done = await _answer(second, question, text="staging")
    assert done.last.type.value == "COMPLETE", done.events
    end = done.of_type("TOOL_END")[0].data
    assert end["ok"] is False and "can no longer be answered" in end["error"] and "unknown" in end["error"]
    assert events_of(events, tool="deploy") == []


async def test_an_answer_that_does_not_fit_is_asked_again(agent_factory, profiles_file, events) -> None:
    async with agent_factory(provider=QuotingModel([("ops_form", {})]), profiles_file=profiles_file,
                             mcp_servers=[stdio_server(events)]) as agent:
        question = (await agent.execute("book it", body={"profile_name": "ops"})).last
        assert "- seats (a whole number, required)" in question.data["question"]
        again = (await _answer(agent, question, text="seats: many\nwindow: yes")).last
        assert again.type.value == "ASK_USER" and "That answer did not fit: seats is a whole number" in \
            again.data["question"]
        done = await _answer(agent, again, text='{"seats": 2, "window": "yes", "meal": "Vegetarian"}')
    assert done.last.type.value == "COMPLETE", done.events
    assert done.of_type("TOOL_END")[0].data["result"] == {"result": "2 seats, window, vegetarian"}
