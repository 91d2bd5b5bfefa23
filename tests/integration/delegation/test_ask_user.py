"""The ASK_USER cycle end to end: the agent asks, the user answers, the run resumes.

Real servers on loopback, SQLite and PostgreSQL; the restart test runs both services as separate
processes and stops them between the question and the answer.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import httpx
from sqlalchemy import select

from agent_service.tools.ask_user import AskUserTool
from agent_service.tools.calculator import CalculatorTool
from agent_service.tools.current_time import CurrentTimeTool
from conversation_service.conversations.repository import ConversationRepository
from conversation_service.db.models import (
    AgentSessionStatus,
    ConversationAgentSession,
    InteractionStatus,
    PendingInteraction,
)
from conversation_service.interactions.expiry import QuestionExpiry
from shared.protocol import utcnow
from shared.transactions import transaction
from tests.integration.conversation_service.support import SECRET, auth, connect, ws_url
from tests.integration.delegation.stack import (
    AGENT_KEY,
    agent_service,
    chat_service,
    final_of,
    frames_of,
    recv_until,
)
from tests.support.servers import ServiceProcess

EXPIRED_NOTICE = "Agent question expired, starting fresh conversation"


async def _ask(stack, ws, cid: str, content: str = "/agent plan a trip") -> dict:
    r = await stack.send(cid, content)
    assert r.status_code == 202, r.text
    frames = await recv_until(ws, lambda f: f["type"] == "agent.ask_user")
    return frames[-1]["data"]


async def _session_rows(stack) -> list[ConversationAgentSession]:
    async with transaction(stack.state.storage.sessionmaker) as session:
        return list((await session.scalars(select(ConversationAgentSession))).all())


async def test_agent_asks_user_answers_run_resumes(database_factory, tmp_path):
    async with (
        agent_service(await database_factory("agent"), tmp_path) as agent_url,
        chat_service(await database_factory("chat"), agent_url) as stack,
    ):
        cid = await stack.conversation()
        ws = await connect(stack.chat_url, cid, "alice")
        ask = await _ask(stack, ws, cid)
        assert ask["kind"] == "question" and "where" in ask["question"].lower()

        status = (await stack.http.get(f"{stack.chat_url}/conversations/{cid}/agent-session",
                                       headers=auth("alice"))).json()
        assert status["status"] == "AWAITING_USER"
        assert status["pending_question"]["question_id"] == ask["question_id"]

        # A client that connects later still sees the question: it is part of the replayable stream.
        late = await connect(stack.chat_url, cid, "alice", after_seq=0)
        replayed = await recv_until(late, lambda f: f["type"] == "agent.ask_user")
        assert replayed[-1]["data"]["question_id"] == ask["question_id"]
        await late.close()

        r = await stack.answer(cid, ask["question_id"], "Lisbon for 3 days")
        assert r.status_code == 202, r.text
        frames = await recv_until(ws, lambda f: f["type"] == "agent.complete")
        await ws.close()
        status = (await stack.http.get(f"{stack.chat_url}/conversations/{cid}/agent-session",
                                       headers=auth("alice"))).json()
    answer = final_of(frames)["data"]["content"]
    assert "Lisbon" in answer and "3-day" in answer
    # The answer is stored as the user's message, visible to every client.
    created = [f["data"] for f in frames_of(frames, "message.created") if f["data"]["role"] == "user"]
    assert created and created[0]["content"] == "Lisbon for 3 days"
    assert status["status"] == "ACTIVE" and status["pending_question"] is None


async def test_chat_message_while_question_pending_is_the_answer(database_factory, tmp_path):
    async with (
        agent_service(await database_factory("agent"), tmp_path) as agent_url,
        chat_service(await database_factory("chat"), agent_url) as stack,
    ):
        cid = await stack.conversation()
        ws = await connect(stack.chat_url, cid, "alice")
        await _ask(stack, ws, cid)
        r = await stack.send(cid, "Porto for 2 days")
        assert r.json()["route"] == {"target": "agent", "reason": "pending_question"}
        frames = await recv_until(ws, lambda f: f["type"] == "agent.complete")
        await ws.close()
    assert "Porto" in final_of(frames)["data"]["content"]


async def test_answer_errors_409_410_404(database_factory, tmp_path):
    async with (
        agent_service(await database_factory("agent"), tmp_path) as agent_url,
        chat_service(await database_factory("chat"), agent_url,
                     delegation={"agent_cleanup_interval_s": 3600}) as stack,
    ):
        cid = await stack.conversation()
        ws = await connect(stack.chat_url, cid, "alice")
        ask = await _ask(stack, ws, cid)

        wrong = await stack.answer(cid, "not-the-question", "Lisbon")
        assert wrong.status_code == 409
        assert wrong.json()["detail"]["pending_question_id"] == ask["question_id"]
        foreign = await stack.answer(cid, ask["question_id"], "Lisbon", user="mallory")
        assert foreign.status_code == 404
        ok = await stack.answer(cid, ask["question_id"], "Lisbon for 3 days")
        assert ok.status_code == 202
        again = await stack.answer(cid, ask["question_id"], "Paris")
        assert again.status_code == 409
        await recv_until(ws, lambda f: f["type"] == "agent.complete")

        # Expired: move the question's deadline into the past, as the clock would.
        ask2 = await _ask(stack, ws, cid, "plan a trip")  # the open session keeps routing to the agent
        async with transaction(stack.state.storage.sessionmaker) as session:
            question = await session.get(PendingInteraction, ask2["question_id"])
            question.expires_at = utcnow() - timedelta(seconds=1)
        gone = await stack.answer(cid, ask2["question_id"], "Lisbon")
        assert gone.status_code == 410
        assert gone.json()["error"] == "gone" and "expired" in gone.json()["detail"]["message"]
        notice = await recv_until(ws, lambda f: f["type"] == "notice")
        assert notice[-1]["data"]["text"] == EXPIRED_NOTICE
        rows = await _session_rows(stack)
        await ws.close()
    assert [r.status for r in rows] == [AgentSessionStatus.ABANDONED.value]


async def test_expiry_abandons_session_and_next_message_starts_fresh(database_factory, tmp_path):
    async with (
        agent_service(await database_factory("agent"), tmp_path) as agent_url,
        chat_service(await database_factory("chat"), agent_url,
                     delegation={"ask_user_timeout_s": 1, "agent_cleanup_interval_s": 0.1}) as stack,
    ):
        cid = await stack.conversation()
        ws = await connect(stack.chat_url, cid, "alice")
        ask = await _ask(stack, ws, cid)
        # The cleanup job expires the question on its own once its second has passed.
        frames = await recv_until(ws, lambda f: f["type"] == "notice", timeout=10)
        assert frames[-1]["data"] == {"code": "agent_question_expired", "text": EXPIRED_NOTICE,
                                      "question_id": ask["question_id"]}
        (first,) = await _session_rows(stack)
        assert first.status == AgentSessionStatus.ABANDONED.value

        r = await stack.send(cid, "/agent what is 2*3")
        assert r.status_code == 202
        done = await recv_until(ws, lambda f: f["type"] == "agent.complete")
        assert "6" in final_of(done)["data"]["content"]
        rows = await _session_rows(stack)
        await ws.close()
    assert len(rows) == 2
    fresh = next(r for r in rows if r.id != first.id)
    assert fresh.status == AgentSessionStatus.ACTIVE.value
    assert fresh.agent_session_id != first.agent_session_id


async def test_three_cleanup_workers_handle_each_expired_question_once(database_factory, tmp_path):
    async with (
        agent_service(await database_factory("agent"), tmp_path) as agent_url,
        chat_service(await database_factory("chat"), agent_url,
                     delegation={"agent_cleanup_interval_s": 3600}) as stack,
    ):
        state = stack.state
        past = utcnow() - timedelta(minutes=1)
        async with transaction(state.storage.sessionmaker) as session:
            for i in range(200):
                conversation = await ConversationRepository(session).create(owner_id="alice", org_id=None, title="")
                row = ConversationAgentSession(
                    conversation_id=conversation.id, agent_session_id=f"agent-{i}", profile_name="default",
                    status=AgentSessionStatus.AWAITING_USER.value, pending_question_id=f"q-{i}",
                )
                session.add(row)
                await session.flush()
                session.add(PendingInteraction(
                    question_id=f"q-{i}", conversation_id=conversation.id, agent_session_row_id=row.id,
                    agent_session_id=f"agent-{i}", kind="question", question="Where to?",
                    asked_at=past - timedelta(minutes=5), expires_at=past,
                ))
        workers = [QuestionExpiry(state.storage.sessionmaker, state.realtime.publisher, state.metrics.agent, batch=7)
                   for _ in range(3)]
        handled = await asyncio.gather(*(w.expire_all_due() for w in workers))
        async with transaction(state.storage.sessionmaker) as session:
            statuses = (await session.scalars(select(PendingInteraction.status))).all()
            rows = (await session.scalars(select(ConversationAgentSession.status))).all()
    every = [qid for ids in handled for qid in ids]
    assert len(every) == 200 and len(set(every)) == 200  # each question exactly once
    assert set(statuses) == {InteractionStatus.EXPIRED.value}
    assert set(rows) == {AgentSessionStatus.ABANDONED.value}


class CountingCalculator(CalculatorTool):
    """The calculator, counting its real runs: proof on the tool side of what approval allowed."""

    runs = 0

    async def run(self, args, ctx):
        type(self).runs += 1
        return await super().run(args, ctx)


class _Tools:
    def __init__(self, *tools) -> None:
        self._tools = {tool.name: tool for tool in tools}

    def get(self, name: str):
        return self._tools.get(name)


APPROVAL_PROFILES = """
profiles:
  - name: default
    system_prompt: You are a helpful assistant.
    tools: [calculator, current_time, ask_user]
    max_steps: 8
  - name: careful
    system_prompt: You are a helpful assistant. The calculator needs the user's approval.
    tools: [calculator, current_time, ask_user]
    approval_required_tools: [calculator]
    max_steps: 8
"""


async def _approval_flow(database_factory, tmp_path, approved: bool) -> tuple[str, list[dict], int]:
    CountingCalculator.runs = 0
    tools = _Tools(CountingCalculator(), CurrentTimeTool(), AskUserTool())
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(APPROVAL_PROFILES)
    async with (
        agent_service(await database_factory("agent"), tmp_path, tools=tools,
                      profiles_file=profiles) as agent_url,
        chat_service(await database_factory("chat"), agent_url,
                     delegation={"agent_profile_name": "careful"}) as stack,
    ):
        cid = await stack.conversation()
        ws = await connect(stack.chat_url, cid, "alice")
        ask = await _ask(stack, ws, cid, "/agent what is 17*23")
        assert ask["kind"] == "approval" and ask["tool"] == "calculator"
        assert ask["args"] == {"expression": "17*23"}
        assert CountingCalculator.runs == 0
        r = await stack.answer(cid, ask["question_id"], "", approved=approved)
        assert r.status_code == 202, r.text
        frames = await recv_until(ws, lambda f: f["type"] in ("agent.complete", "agent.error"))
        await ws.close()
    return final_of(frames)["data"]["content"], frames, CountingCalculator.runs


async def test_approval_approve_runs_the_tool(database_factory, tmp_path):
    answer, frames, runs = await _approval_flow(database_factory, tmp_path, approved=True)
    assert runs == 1
    assert "391" in answer
    assert frames_of(frames, "agent.tool_end")[0]["data"]["ok"] is True


async def test_approval_deny_completes_without_running_the_tool(database_factory, tmp_path):
    answer, frames, runs = await _approval_flow(database_factory, tmp_path, approved=False)
    assert runs == 0
    assert frames[-1]["type"] == "agent.complete"
    assert "391" not in answer


async def test_answer_resumes_after_both_services_restart(database_factory, tmp_path: Path):
    agent_db, chat_db = await database_factory("agent"), await database_factory("chat")
    agent = ServiceProcess("agent_service", {
        "AGENT_SERVICE_DATABASE_URL": agent_db, "AGENT_SERVICE_API_KEYS": AGENT_KEY,
        "AGENT_SERVICE_MIGRATE_ON_START": "true", "AGENT_SERVICE_KNOWLEDGE_DIR": str(tmp_path / "no-docs"),
    })
    chat = ServiceProcess("conversation_service", {
        "CONVERSATION_DATABASE_URL": chat_db, "AGENT_SERVICE_URL": agent.url, "AGENT_SERVICE_API_KEY": AGENT_KEY,
        "AUTH_JWT_SECRET": SECRET, "MIGRATE_ON_START": "true",
    })
    import websockets

    try:
        await agent.start(tmp_path)
        await chat.start(tmp_path)
        async with httpx.AsyncClient(timeout=30) as http:
            cid = (await http.post(f"{chat.url}/conversations", json={"title": "trip"}, headers=auth("alice"))).json()["id"]
            async with websockets.connect(ws_url(chat.url, cid), additional_headers=auth("alice")) as ws:
                r = await http.post(f"{chat.url}/conversations/{cid}/messages",
                                    json={"content": "/agent plan a trip"}, headers=auth("alice"))
                assert r.status_code == 202
                asked = await recv_until(ws, lambda f: f["type"] == "agent.ask_user")
            question_id = asked[-1]["data"]["question_id"]
            last_seq = asked[-1]["seq"]
            before = (await http.get(f"{chat.url}/conversations/{cid}/agent-session", headers=auth("alice"))).json()

            await chat.stop()
            await agent.stop()
            await agent.start(tmp_path)
            await chat.start(tmp_path)

            async with websockets.connect(ws_url(chat.url, cid, after_seq=last_seq),
                                          additional_headers=auth("alice")) as ws:
                r = await http.post(f"{chat.url}/conversations/{cid}/agent-answer",
                                    json={"question_id": question_id, "answer": "Lisbon for 3 days"},
                                    headers=auth("alice"))
                assert r.status_code == 202, r.text
                frames = await recv_until(ws, lambda f: f["type"] in ("agent.complete", "agent.error"))
            session = (await http.get(f"{chat.url}/conversations/{cid}/agent-session", headers=auth("alice"))).json()
    finally:
        await chat.stop()
        await agent.stop()
    assert frames[-1]["type"] == "agent.complete", [f["type"] for f in frames] + [chat.logs()[-2000:]]
    answer = final_of(frames)["data"]["content"]
    # Both the question's context (a trip plan) and the answer (Lisbon, 3 days) are in the result.
    assert "Lisbon" in answer and "3-day" in answer and "plan" in answer.lower()
    # The same agent session resumed from its persisted state; no new one was started.
    assert before["status"] == "AWAITING_USER" and session["agent_session_id"] == before["agent_session_id"]
    assert all(f["seq"] > last_seq for f in frames)
