"""Chat message -> MessageRouter -> Agent Service -> events fanned out to WebSocket clients.

Both services are real uvicorn servers on loopback, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json

from sqlalchemy import func, select

from conversation_service.db.models import ConversationAgentSession, DeadLetter, Message
from conversation_service.settings.routing import RoutingSettings
from shared.transactions import transaction
from tests.integration.conversation_service.support import auth, connect
from tests.integration.delegation.stack import (
    agent_service,
    chat_service,
    deltas_text,
    final_of,
    frames_of,
    recv_until,
)
from tests.support.servers import free_port


async def _turn(stack, ws, conversation_id: str, content: str, until: str = "agent.complete") -> list[dict]:
    r = await stack.send(conversation_id, content)
    assert r.status_code == 202, r.text
    return await recv_until(ws, lambda f: f["type"] in (until, "agent.error", "message.error"))


async def test_agent_answers_over_websocket(database_factory, tmp_path):
    async with (
        agent_service(await database_factory("agent"), tmp_path) as agent_url,
        chat_service(await database_factory("chat"), agent_url) as stack,
    ):
        cid = await stack.conversation()
        ws = await connect(stack.chat_url, cid, "alice")
        r = await stack.send(cid, "/agent what is 17*23")
        assert r.status_code == 202
        assert r.json()["route"] == {"target": "agent", "reason": "explicit_command"}
        frames = await recv_until(ws, lambda f: f["type"] == "agent.complete")
        await ws.close()

    types = [f["type"] for f in frames]
    assert "agent.tool_start" in types and "agent.tool_end" in types
    start = frames_of(frames, "agent.tool_start")[0]["data"]
    assert start["tool"] == "calculator"
    end = frames_of(frames, "agent.tool_end")[0]["data"]
    assert end["ok"] is True and end["call_id"] == start["call_id"]
    created = next(f for f in frames if f["type"] == "message.created" and f["data"]["role"] == "assistant")
    message_id = created["data"]["id"]
    final = final_of(frames, message_id)["data"]["content"]
    assert "391" in final
    assert final == deltas_text(frames, message_id)
    seqs = [f["seq"] for f in frames]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


async def test_multi_turn_uses_earlier_answers(database_factory, tmp_path):
    async with (
        agent_service(await database_factory("agent"), tmp_path) as agent_url,
        chat_service(await database_factory("chat"), agent_url) as stack,
    ):
        cid = await stack.conversation()
        ws = await connect(stack.chat_url, cid, "alice")
        exchanges = [
            ("/agent my name is Ada", None),
            ("what is 17*23", "391"),  # no /agent: the open agent session keeps the conversation there
            ("what is that plus 9", "400"),
            ("multiply it by 2", "800"),
            ("what is my name?", "Ada"),
        ]
        answers = []
        for content, expected in exchanges:
            frames = await _turn(stack, ws, cid, content)
            assert frames[-1]["type"] == "agent.complete", [f["type"] for f in frames]
            text = final_of(frames)["data"]["content"]
            answers.append(text)
            if expected:
                assert expected in text, (content, text)
        await ws.close()
        async with transaction(stack.state.storage.sessionmaker) as session:
            rows = (await session.scalars(select(ConversationAgentSession))).all()
    # One agent session carried the whole conversation.
    assert len(rows) == 1 and rows[0].agent_session_id


async def test_plain_message_goes_to_direct_llm(database_factory, tmp_path):
    async with (
        agent_service(await database_factory("agent"), tmp_path) as agent_url,
        chat_service(await database_factory("chat"), agent_url) as stack,
    ):
        cid = await stack.conversation()
        ws = await connect(stack.chat_url, cid, "alice")
        r = await stack.send(cid, "hello there")
        assert r.json()["route"] == {"target": "direct_llm", "reason": "default"}
        frames = await recv_until(ws, lambda f: f["type"] == "message.completed")
        await ws.close()
    assert not [f for f in frames if f["type"].startswith("agent.")]
    assert final_of(frames)["data"]["content"]


async def test_routing_disabled_sends_agent_commands_to_direct_llm(database_factory, tmp_path):
    async with (
        agent_service(await database_factory("agent"), tmp_path) as agent_url,
        chat_service(await database_factory("chat"), agent_url,
                     routing=RoutingSettings(enabled=False)) as stack,
    ):
        cid = await stack.conversation()
        ws = await connect(stack.chat_url, cid, "alice")
        r = await stack.send(cid, "/agent what is 17*23")
        assert r.json()["route"]["target"] == "direct_llm"
        frames = await recv_until(ws, lambda f: f["type"] == "message.completed")
        await ws.close()
    assert not [f for f in frames if f["type"].startswith("agent.")]


async def test_agent_down_falls_back_to_direct_llm_with_notice(database_url):
    async with chat_service(database_url, f"http://127.0.0.1:{free_port()}") as stack:
        cid = await stack.conversation()
        ws = await connect(stack.chat_url, cid, "alice")
        r = await stack.send(cid, "/agent what is 17*23")
        assert r.status_code == 202
        frames = await recv_until(ws, lambda f: f["type"] == "message.completed")
        await ws.close()
        async with transaction(stack.state.storage.sessionmaker) as session:
            letters = (await session.scalars(select(DeadLetter))).all()
            open_sessions = await session.scalar(
                select(func.count()).select_from(ConversationAgentSession)
                .where(ConversationAgentSession.status.in_(["ACTIVE", "AWAITING_USER"]))
            )
    notices = frames_of(frames, "notice")
    assert notices and notices[0]["data"]["text"] == "Advanced features temporarily unavailable, using standard chat"
    assert final_of(frames)["data"]["content"]
    assert len(letters) == 1 and letters[0].attempts == 4  # first try + 3 retries
    assert letters[0].payload["message"] == "what is 17*23"
    assert open_sessions == 0  # the next message does not stick to a session that never existed


async def test_client_ignoring_agent_frames_gets_the_whole_answer(database_factory, tmp_path):
    """An old client knows only message.* frames; the agent's reply still reaches it complete."""
    async with (
        agent_service(await database_factory("agent"), tmp_path) as agent_url,
        chat_service(await database_factory("chat"), agent_url) as stack,
    ):
        cid = await stack.conversation()
        ws = await connect(stack.chat_url, cid, "alice")
        await stack.send(cid, "/agent what is 6*7")
        known = {"message.created", "message.delta", "message.completed"}
        text: dict[str, str] = {}
        async with asyncio.timeout(20):
            while True:
                frame = json.loads(await ws.recv())
                if frame["type"] not in known:
                    continue  # what an old client does with a type it does not know
                data = frame["data"]
                if frame["type"] == "message.delta":
                    text[data["message_id"]] = text.get(data["message_id"], "") + data["text"]
                if frame["type"] == "message.completed":
                    break
        await ws.close()
    assert "42" in data["content"] and text[data["message_id"]] == data["content"]


async def test_concurrent_sends_create_one_agent_session(database_factory, tmp_path):
    async with (
        agent_service(await database_factory("agent"), tmp_path) as agent_url,
        chat_service(await database_factory("chat"), agent_url) as stack,
    ):
        cid = await stack.conversation()
        responses = await asyncio.gather(*(stack.send(cid, f"/agent what is {i}*2") for i in range(50)))
        assert all(r.status_code == 202 for r in responses), [r.text for r in responses if r.status_code != 202]
        await stack.state.tasks.join()
        async with transaction(stack.state.storage.sessionmaker) as session:
            rows = (await session.scalars(select(ConversationAgentSession))).all()
            replies = (await session.scalars(
                select(Message).where(Message.conversation_id == cid, Message.role == "assistant")
            )).all()
    assert len(rows) == 1
    # Every message was answered: turns of one conversation run one after another.
    assert len(replies) == 50 and all(m.status == "complete" for m in replies)
    answers = sorted(m.content for m in replies)
    assert any("= 98" in a for a in answers)


async def test_bola_on_agent_endpoints(database_factory, tmp_path):
    async with (
        agent_service(await database_factory("agent"), tmp_path) as agent_url,
        chat_service(await database_factory("chat"), agent_url) as stack,
    ):
        cid = await stack.conversation("alice")
        r = await stack.http.get(f"{stack.chat_url}/conversations/{cid}/agent-session", headers=auth("mallory"))
        assert r.status_code == 404
        r = await stack.answer(cid, "q-1", "Lisbon", user="mallory")
        assert r.status_code == 404
