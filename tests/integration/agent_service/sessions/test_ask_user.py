"""ASK_USER: the run pauses, the session waits, an answer resumes it from the database."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson

from shared.sse import SSEDecoder, decode_envelope
from tests.support.servers import ServiceProcess


async def test_ask_user_pauses_and_answer_resumes(agent, db) -> None:
    asked = await agent.execute("plan a trip")
    assert asked.status == 200
    ask = asked.last
    assert ask.type.value == "ASK_USER", [e.type for e in asked.events]
    assert ask.data["question"] and ask.data["kind"] == "question"
    session_id = ask.session_id

    status = await agent.status(session_id)
    assert status["status"] == "AWAITING_USER"
    assert status["pending_question"]["question_id"] == ask.data["question_id"]
    assert status["last_seq"] == ask.seq

    wrong = await agent.execute(
        body={"session_id": session_id, "answer": {"question_id": "not-the-question", "text": "Lisbon"}}
    )
    assert wrong.status == 409 and wrong.body["error"] == "question_mismatch"
    # A new message while the question is open is refused too: the answer must come first.
    pending = await agent.execute("what is 1+1", body={"session_id": session_id})
    assert pending.status == 409 and pending.body["error"] == "question_pending"
    assert await db.runs(session_id) == 1

    answered = await agent.execute(
        body={"session_id": session_id, "answer": {"question_id": ask.data["question_id"], "text": "Lisbon for 2 days"}}
    )
    assert answered.status == 200
    assert answered.events[0].seq == ask.seq + 1
    assert answered.last.type.value == "COMPLETE"
    assert "Lisbon" in answered.last.data["answer"]
    assert (await agent.status(session_id))["status"] == "COMPLETED"

    late = await agent.execute(
        body={"session_id": session_id, "answer": {"question_id": ask.data["question_id"], "text": "again"}}
    )
    assert late.status == 409 and late.body["error"] == "not_awaiting_user"


async def test_answer_after_expiry_is_410(agent_factory, db) -> None:
    async with agent_factory(ask_user_timeout_seconds=0.001) as agent:
        asked = await agent.execute("plan a trip")
        ask = asked.last
        resp = await agent.execute(
            body={"session_id": ask.session_id, "answer": {"question_id": ask.data["question_id"], "text": "Rome"}}
        )
        assert resp.status == 410 and resp.body["error"] == "question_expired"
        status = await agent.status(ask.session_id)
        assert status["status"] == "FAILED" and status["pending_question"] is None
        log = await agent.replay(ask.session_id, ask.seq)
        assert [(e.type.value, e.data["code"]) for e in log.events] == [("ERROR", "QUESTION_EXPIRED")]
        # The session takes new messages again.
        again = await agent.execute("what is 2+3", body={"session_id": ask.session_id})
        assert again.last.type.value == "COMPLETE" and "5" in again.last.data["answer"]
        assert again.events[0].seq == ask.seq + 2


async def test_cancel_a_paused_session(agent) -> None:
    ask = (await agent.execute("plan a trip")).last
    resp = await agent.http.post(f"/api/v1/agent/sessions/{ask.session_id}/cancel", headers=agent.headers())
    assert resp.status_code == 200 and resp.json()["status"] == "CANCELLED"
    log = await agent.replay(ask.session_id, ask.seq)
    assert [(e.type.value, e.data["code"]) for e in log.events] == [("ERROR", "CANCELLED")]


async def _read_stream(client: httpx.AsyncClient, url: str, **kwargs) -> list:
    decoder = SSEDecoder()
    events = []
    async with client.stream("POST", url, **kwargs) as resp:
        assert resp.status_code == 200, await resp.aread()
        async for chunk in resp.aiter_bytes():
            events += [decode_envelope(e) for e in decoder.feed(chunk)]
    return events


async def test_answer_resumes_after_a_process_restart(database_url: str, tmp_path: Path) -> None:
    env = {
        "AGENT_SERVICE_DATABASE_URL": database_url,
        "AGENT_SERVICE_API_KEYS": "restart-key",
        "AGENT_SERVICE_MIGRATE_ON_START": "true",
        "LLM_PROVIDER": "builtin",
        "LLM_BUILTIN_FIRST_TOKEN_MS": "0",
        "LLM_BUILTIN_CHUNK_DELAY_MS": "0",
    }
    headers = {"X-API-Key": "restart-key", "X-Request-ID": "req-restart-1"}
    first = ServiceProcess("agent_service", env)
    await first.start(tmp_path)
    try:
        async with httpx.AsyncClient(base_url=first.url, timeout=30) as client:
            events = await _read_stream(
                client, "/api/v1/agent/execute", headers=headers,
                json={"message": "plan a trip", "user_context": {"user_id": "u-1"}},
            )
    finally:
        await first.stop()
    ask = events[-1]
    assert ask.type.value == "ASK_USER"

    second = ServiceProcess("agent_service", env)
    await second.start(tmp_path)
    try:
        async with httpx.AsyncClient(base_url=second.url, timeout=30) as client:
            status = (await client.get(f"/api/v1/agent/sessions/{ask.session_id}", headers=headers)).json()
            assert status["status"] == "AWAITING_USER"
            resumed = await _read_stream(
                client, "/api/v1/agent/execute", headers=headers,
                json={
                    "session_id": ask.session_id,
                    "user_context": {"user_id": "u-1"},
                    "answer": {"question_id": ask.data["question_id"], "text": "Kyoto for 4 days"},
                },
            )
    finally:
        await second.stop()
    # Logs are JSON lines carrying the request and session they belong to, never message bodies.
    lines = [orjson.loads(line) for line in second.logs().splitlines() if line.startswith("{")]
    ended = [line for line in lines if line.get("msg") == "run ended"]
    assert ended and ended[0]["session_id"] == ask.session_id and ended[0]["request_id"] == "req-restart-1"
    assert not any("Kyoto" in line.get("msg", "") for line in lines)
    assert resumed[0].seq == ask.seq + 1
    assert resumed[-1].type.value == "COMPLETE"
    assert "Kyoto" in resumed[-1].data["answer"]
    seqs = [e.seq for e in events + resumed]
    assert seqs == list(range(1, len(seqs) + 1))
