"""A rate limit of two agent requests per window for one organisation, seen from the chat: the third
agent message shows ``agent.waiting`` (reason, countdown) and completes after the window; another
organisation is not slowed. Both services real, on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from datetime import datetime

import websockets

from tests.integration.conversation_service.support import token, ws_url
from tests.integration.delegation.stack import agent_service, chat_service, frames_of, recv_until

WINDOW_S = 2.0


def _done(frame: dict) -> bool:
    return frame["type"] in ("agent.complete", "agent.error", "message.error")


async def _agent_turn(stack, ws, conversation_id: str, headers: dict) -> list[dict]:
    r = await stack.http.post(
        f"{stack.chat_url}/conversations/{conversation_id}/messages", json={"content": "/agent hello there"},
        headers=headers,
    )
    assert r.status_code == 202, r.text
    return await recv_until(ws, _done)


async def _open(stack, user: str, org: str):
    headers = {"Authorization": f"Bearer {token(user, org)}"}
    r = await stack.http.post(f"{stack.chat_url}/conversations", json={"title": "t"}, headers=headers)
    assert r.status_code == 201, r.text
    cid = r.json()["id"]
    return cid, headers, await websockets.connect(ws_url(stack.chat_url, cid), additional_headers=headers)


async def test_the_third_agent_message_waits_visibly_and_other_organisations_do_not(database_factory, tmp_path):
    limits = tmp_path / "limits.yaml"
    limits.write_text(f"acme: {{requests: 2, window_s: {WINDOW_S}}}\n")
    overrides = {"rate_limit": {"overrides_file": limits}}
    agent_db, chat_db = await database_factory("agent"), await database_factory("chat")
    async with agent_service(agent_db, tmp_path, **overrides) as agent_url, chat_service(chat_db, agent_url) as stack:
        alice, alice_auth, alice_ws = await _open(stack, "alice", "acme")
        bob, bob_auth, bob_ws = await _open(stack, "bob", "globex")
        started = time.monotonic()
        first = await _agent_turn(stack, alice_ws, alice, alice_auth)
        second = await _agent_turn(stack, alice_ws, alice, alice_auth)
        other = await _agent_turn(stack, bob_ws, bob, bob_auth)
        third = await _agent_turn(stack, alice_ws, alice, alice_auth)
        elapsed = time.monotonic() - started
        await alice_ws.close()
        await bob_ws.close()

    for frames in (first, second, other, third):
        assert frames[-1]["type"] == "agent.complete", [f["type"] for f in frames]
    assert not frames_of(first + second + other, "agent.waiting")
    [waiting] = frames_of(third, "agent.waiting")
    data = waiting["data"]
    assert "2 requests per 2 s" in data["reason"] and "organisation acme" in data["reason"]
    assert 0 < data["wait_s"] <= WINDOW_S and data["limit"] == "requests"
    assert datetime.fromisoformat(data["until"]).tzinfo is not None
    assert [f["type"] for f in third].index("agent.waiting") < [f["type"] for f in third].index("message.delta")
    assert elapsed >= WINDOW_S * 0.9
