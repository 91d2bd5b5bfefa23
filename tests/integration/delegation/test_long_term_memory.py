"""Long-term memory seen from the chat, both services real (SQLite and PostgreSQL): what alice told
the agent in one conversation is recalled in a new one, for her only; she can list and delete it."""

from __future__ import annotations

import asyncio

import websockets

from tests.integration.conversation_service.support import auth, token, ws_url
from tests.integration.delegation.stack import agent_service, chat_service, final_of, recv_until
from tests.support.servers import free_port


async def _agent_reply(stack, user: str, text: str, headers: dict | None = None) -> str:
    """``text`` in a new conversation of ``user`` (signed in with ``headers``, by default in acme)."""
    headers = headers or auth(user)
    r = await stack.http.post(f"{stack.chat_url}/conversations", json={"title": "t"}, headers=headers)
    conversation = r.json()["id"]
    ws = await websockets.connect(ws_url(stack.chat_url, conversation), additional_headers=headers)
    sent = await stack.http.post(f"{stack.chat_url}/conversations/{conversation}/messages",
                                 json={"content": text}, headers=headers)
    assert sent.status_code == 202 and sent.json()["route"]["target"] == "agent", sent.text
    frames = await recv_until(ws, lambda f: f["type"] in ("agent.complete", "agent.error"))
    await ws.close()
    assert frames[-1]["type"] == "agent.complete", frames[-1]
    return final_of(frames)["data"]["content"]


async def _remembered(stack, user: str, count: int) -> None:
    """Wait until ``user`` has ``count`` memories: a turn is remembered in the background after the
    agent's reply ended, so a question asked at once may come before it is written."""
    async with asyncio.timeout(10):
        while len((await stack.http.get(f"{stack.chat_url}/memory", headers=auth(user))).json()["items"]) < count:
            await asyncio.sleep(0.02)  # the write is in another service's background queue: nothing to wait on here


async def test_a_new_conversation_recalls_what_the_user_said_and_only_for_her(database_factory, tmp_path):
    agent_db, chat_db = await database_factory("agent"), await database_factory("chat")
    async with agent_service(agent_db, tmp_path) as agent_url, chat_service(chat_db, agent_url) as stack:
        told = await _agent_reply(stack, "alice", "/agent remember that my favourite colour is green")
        await _remembered(stack, "alice", 1)
        recalled = await _agent_reply(stack, "alice", "/agent what is my favourite colour?")
        bob = await _agent_reply(stack, "bob", "/agent what is my favourite colour?")
        other_org = {"Authorization": f"Bearer {token('alice', 'globex')}"}
        alice_elsewhere = await _agent_reply(stack, "alice", "/agent what is my favourite colour?", other_org)
    assert told == "I'll remember that your favourite colour is green."
    assert recalled == "Your favourite colour is green."
    assert "green" not in bob and "green" not in alice_elsewhere


async def test_a_user_sees_and_deletes_only_her_own_memory(database_factory, tmp_path):
    agent_db, chat_db = await database_factory("agent"), await database_factory("chat")
    async with agent_service(agent_db, tmp_path) as agent_url, chat_service(chat_db, agent_url) as stack:
        await _agent_reply(stack, "alice", "/agent remember that my favourite colour is green")
        await _agent_reply(stack, "bob", "/agent remember that my favourite colour is blue")
        await _remembered(stack, "alice", 1)
        await _remembered(stack, "bob", 1)
        base = stack.chat_url
        mine = (await stack.http.get(f"{base}/memory", headers=auth("alice"))).json()["items"]
        bobs = (await stack.http.get(f"{base}/memory", headers=auth("bob"))).json()["items"]
        assert [m["content"].splitlines()[0] for m in mine] == [
            "User: remember that my favourite colour is green"]
        assert "green" not in str(bobs)

        stolen = await stack.http.delete(f"{base}/memory/{mine[0]['id']}", headers=auth("bob"))
        assert stolen.status_code == 404
        assert (await stack.http.get(f"{base}/memory")).status_code == 401
        deleted = await stack.http.delete(f"{base}/memory/{mine[0]['id']}", headers=auth("alice"))
        assert deleted.status_code == 200 and deleted.json() == {"deleted": 1}
        assert (await stack.http.get(f"{base}/memory", headers=auth("alice"))).json()["items"] == []
        after = await _agent_reply(stack, "alice", "/agent what is my favourite colour?")
        assert "green" not in after

        everything = await stack.http.delete(f"{base}/memory", headers=auth("bob"))
        assert everything.json() == {"deleted": 1}
        assert (await stack.http.get(f"{base}/memory", headers=auth("bob"))).json()["items"] == []


async def test_memory_requests_answer_503_while_the_agent_service_is_unreachable(database_factory):
    unreachable = f"http://127.0.0.1:{free_port()}"
    async with chat_service(await database_factory("chat"), unreachable) as stack:
        for method, path in (("GET", "/memory"), ("DELETE", "/memory"), ("DELETE", "/memory/7")):
            r = await stack.http.request(method, f"{stack.chat_url}{path}", headers=auth("alice"))
            assert r.status_code == 503 and r.json()["error"] == "unavailable", (method, path, r.text)
