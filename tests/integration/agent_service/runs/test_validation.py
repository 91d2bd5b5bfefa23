"""Bad input gets a precise 4xx and writes nothing."""

from __future__ import annotations

import pytest


async def test_auth_failures_and_key_rotation(agent, db) -> None:
    body = {"message": "what is 1+1", "user_context": {"user_id": "u"}}
    missing = await agent.http.post("/api/v1/agent/execute", json=body)
    wrong = await agent.http.post("/api/v1/agent/execute", json=body, headers={"X-API-Key": "nope"})
    assert missing.status_code == 401 and wrong.status_code == 401
    assert wrong.json() == {"error": "unauthorized", "detail": "missing or invalid X-API-Key"}
    for path in ("/api/v1/agent/profiles", "/api/v1/agent/sessions/x", "/api/v1/agent/sessions/x/events"):
        assert (await agent.http.get(path, headers={"X-API-Key": "nope"})).status_code == 401
    assert (await agent.http.post("/api/v1/agent/sessions/x/cancel")).status_code == 401
    assert await db.sessions() == 0
    # The previous key of a rotation is still accepted.
    old = await agent.execute("what is 1+1", headers={"X-API-Key": "test-key-previous"})
    assert old.status == 200 and old.last.type.value == "COMPLETE"


async def test_health_ready_and_metrics_need_no_key(agent) -> None:
    assert (await agent.http.get("/health")).json() == {"status": "ok", "memory": "NORMAL"}
    ready = await agent.http.get("/ready")
    assert ready.status_code == 200 and ready.json()["database"] == "ok"
    assert (await agent.http.get("/metrics")).status_code == 200


async def test_profiles_are_listed(agent) -> None:
    resp = await agent.http.get("/api/v1/agent/profiles", headers=agent.headers())
    assert resp.status_code == 200
    default = {p["name"]: p for p in resp.json()}["default"]
    assert set(default["tools"]) == {
        "calculator", "knowledge_search", "current_time", "ask_user", "create_file", "share_link", "emit_data",
    }


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({"profile_name": "nobody", "message": "hi", "user_context": {"user_id": "u"}}, 404, "profile_not_found"),
        ({"message": "hi"}, 422, "invalid_request"),
        ({"message": "hi", "user_context": {"user_id": "u"}, "surprise": 1}, 422, "invalid_request"),
        ({"message": "   ", "user_context": {"user_id": "u"}}, 422, "invalid_request"),
        ({"message": "x" * 101, "user_context": {"user_id": "u"}}, 413, "message_too_large"),
        ({"session_id": "missing", "message": "hi", "user_context": {"user_id": "u"}}, 404, "session_not_found"),
        (
            {"message": "", "user_context": {"user_id": "u"}, "answer": {"question_id": "q", "text": "a"}},
            422, "invalid_request",
        ),
    ],
)
async def test_bad_requests_write_nothing(agent_factory, db, body, status, error) -> None:
    async with agent_factory(max_message_chars=100) as agent:
        resp = await agent.http.post("/api/v1/agent/execute", json=body, headers=agent.headers())
        assert resp.status_code == status, resp.text
        assert resp.json()["error"] == error
        assert await db.sessions() == 0


async def test_malformed_json_and_oversized_body(agent_factory, db) -> None:
    async with agent_factory(max_body_bytes=2000) as agent:
        bad = await agent.http.post(
            "/api/v1/agent/execute", content=b"{not json", headers={**agent.headers(), "content-type": "application/json"}
        )
        assert bad.status_code == 422
        big = await agent.http.post(
            "/api/v1/agent/execute", json={"message": "y" * 5000, "user_context": {"user_id": "u"}},
            headers=agent.headers(),
        )
        assert big.status_code == 413 and big.json()["error"] == "payload_too_large"
        assert await db.sessions() == 0


async def test_unknown_session_endpoints_are_404(agent) -> None:
    for method, path in (
        ("GET", "/api/v1/agent/sessions/nope"),
        ("GET", "/api/v1/agent/sessions/nope/events"),
        ("POST", "/api/v1/agent/sessions/nope/cancel"),
    ):
        resp = await agent.http.request(method, path, headers=agent.headers())
        assert resp.status_code == 404 and resp.json()["error"] == "session_not_found"


async def test_bad_last_event_id_is_422(agent) -> None:
    done = await agent.execute("what is 1+1")
    resp = await agent.http.get(
        f"/api/v1/agent/sessions/{done.last.session_id}/events", headers={**agent.headers(), "Last-Event-ID": "abc"}
    )
    assert resp.status_code == 422


@pytest.mark.parametrize("chars", [40_000, 2_000_000], ids=["40kB", "2MB"])
async def test_a_message_too_large_is_413_whatever_its_size(agent, db, chars: int) -> None:
    # 40 kB passes the contract's outer cap and fails the configured limit (32,000); 2 MB fails the
    # outer cap (200,000) but fits the body limit (8 MiB): both are a message too large.
    for body in (
        {"message": "x" * chars, "user_context": {"user_id": "u"}},
        {"session_id": "s", "user_context": {"user_id": "u"}, "answer": {"question_id": "q", "text": "x" * chars}},
    ):
        resp = await agent.http.post("/api/v1/agent/execute", json=body, headers=agent.headers())
        assert resp.status_code == 413, resp.text[:300]
        assert resp.json()["error"] == "message_too_large"
    assert await db.sessions() == 0
