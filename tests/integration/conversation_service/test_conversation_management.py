"""Conversations people can manage: titles from the first message, rename, delete, search; and
the state a page needs after a reload (the text so far of a streaming reply, the agent's
questions). Every route answers 404 to another user and to the same user in another organisation.
Real server, SQLite and PostgreSQL."""

from __future__ import annotations

import os
from datetime import timedelta

import httpx
import websockets

from conversation_service.db.models import (
    ConversationAgentSession,
    ConversationFrame,
    InteractionStatus,
    Message,
    MessageRole,
    MessageStatus,
    PendingInteraction,
)
from conversation_service.realtime.frames import FrameType, MessageCreated, MessageDelta
from conversation_service.realtime.repository import FrameRepository
from shared.protocol import utcnow
from shared.transactions import transaction
from tests.integration.conversation_service.support import (
    auth,
    collect_until,
    connect,
    make_settings,
    new_conversation,
    running,
    token,
)

os.environ.setdefault("LLM_BUILTIN_FIRST_TOKEN_MS", "0")
os.environ.setdefault("LLM_BUILTIN_CHUNK_DELAY_MS", "0")


def other_org() -> dict[str, str]:
    """Alice's headers in another organisation. Made per call: a token made at import expires
    before the tests that use it run, in a suite that takes longer than its lifetime."""
    return {"Authorization": f"Bearer {token('alice', 'globex')}"}


async def _titles(client: httpx.AsyncClient, base: str, query: str = "", headers=None) -> list[str]:
    r = await client.get(f"{base}/conversations{query}", headers=headers or auth("alice"))
    assert r.status_code == 200, r.text
    return [c["title"] for c in r.json()["items"]]


async def test_an_untitled_conversation_is_titled_after_its_first_message(database_url: str) -> None:
    async with running(make_settings(database_url)) as (base, app), httpx.AsyncClient() as client:
        conv = await new_conversation(client, base, "alice", title="")
        assert conv["title"] == ""
        first = "/agent   Plan a trip\nto Lisbon for three days, with a day in Sintra and one by the sea " + "x" * 40
        for content in (first, "a second message does not rename it"):
            r = await client.post(f"{base}/conversations/{conv['id']}/messages", json={"content": content},
                                  headers=auth("alice"))
            assert r.status_code == 202, r.text
        await app.state.tasks.join()
        got = (await client.get(f"{base}/conversations/{conv['id']}", headers=auth("alice"))).json()
        # One line, the routing command left out, cut at a word with an ellipsis.
        assert got["title"] == "Plan a trip to Lisbon for three days, with a day in Sintra and one by the sea…"

        named = await new_conversation(client, base, "alice", title="My own title")
        await client.post(f"{base}/conversations/{named['id']}/messages", json={"content": "hello"},
                          headers=auth("alice"))
        await app.state.tasks.join()
        assert (await client.get(f"{base}/conversations/{named['id']}", headers=auth("alice"))).json()["title"] \
            == "My own title"


async def test_rename(database_url: str) -> None:
    async with running(make_settings(database_url)) as (base, _app), httpx.AsyncClient() as client:
        conv = await new_conversation(client, base, "alice", title="old")
        url = f"{base}/conversations/{conv['id']}"
        r = await client.patch(url, json={"title": "  Trip to Lisbon  "}, headers=auth("alice"))
        assert r.status_code == 200, r.text
        assert r.json()["title"] == "Trip to Lisbon"
        assert r.json()["updated_at"] > conv["updated_at"]
        assert (await client.get(url, headers=auth("alice"))).json()["title"] == "Trip to Lisbon"

        for body in ({"title": "   "}, {"title": "x" * 201}, {}, {"title": "ok", "owner_id": "mallory"}):
            bad = await client.patch(url, json=body, headers=auth("alice"))
            assert bad.status_code == 422, body
            assert bad.json()["error"] == "validation_error"
        assert (await client.patch(url, json={"title": "x"})).status_code == 401
        for stranger in (auth("mallory"), other_org()):
            r = await client.patch(url, json={"title": "taken over"}, headers=stranger)
            assert r.status_code == 404 and r.json() == {"error": "not_found", "detail": "conversation not found"}
        assert (await client.get(url, headers=auth("alice"))).json()["title"] == "Trip to Lisbon"


async def test_delete_hides_the_conversation_everywhere(database_url: str) -> None:
    async with running(make_settings(database_url)) as (base, app), httpx.AsyncClient() as client:
        kept = await new_conversation(client, base, "alice", title="kept")
        conv = await new_conversation(client, base, "alice", title="doomed")
        url = f"{base}/conversations/{conv['id']}"
        await client.post(f"{url}/messages", json={"content": "hello"}, headers=auth("alice"))
        await app.state.tasks.join()

        for stranger in (auth("mallory"), other_org()):
            r = await client.delete(url, headers=stranger)
            assert r.status_code == 404 and r.json()["error"] == "not_found"
        assert (await client.delete(url)).status_code == 401
        assert (await client.get(url, headers=auth("alice"))).status_code == 200

        async with await connect(base, conv["id"], "alice") as ws:
            r = await client.delete(url, headers=auth("alice"))
            assert r.status_code == 204 and r.content == b""
            # The owner's other open pages are told.
            frames = await collect_until(ws, lambda f: f["type"] == "conversation.deleted")
            assert frames[-1]["data"] == {"conversation_id": conv["id"]}

        for method, path in (("GET", ""), ("GET", "/messages"), ("GET", "/agent-session"),
                             ("GET", "/agent-questions"), ("PATCH", ""), ("DELETE", "")):
            r = await client.request(method, url + path, headers=auth("alice"),
                                     json={"title": "back"} if method == "PATCH" else None)
            assert r.status_code == 404, (method, path, r.text)
        posted = await client.post(f"{url}/messages", json={"content": "still there?"}, headers=auth("alice"))
        assert posted.status_code == 404
        assert await _titles(client, base) == ["kept"]
        async with await connect(base, conv["id"], "alice") as ws:
            try:
                await ws.recv()
                raise AssertionError("the WebSocket of a deleted conversation stayed open")
            except websockets.ConnectionClosed as closed:
                assert closed.rcvd.code == 1008
        assert kept["id"] != conv["id"]


async def test_search_over_titles_and_owner_scoped_lists(database_url: str) -> None:
    async with running(make_settings(database_url)) as (base, _app), httpx.AsyncClient() as client:
        for title in ("Trip to Lisbon", "Budget 2027", "lisbon restaurants", "100% sure_thing"):
            await new_conversation(client, base, "alice", title=title)
        await new_conversation(client, base, "mallory", title="Lisbon for mallory")
        await client.post(f"{base}/conversations", json={"title": "Lisbon in another org"}, headers=other_org())

        assert sorted(await _titles(client, base, "?q=LISBON")) == ["Trip to Lisbon", "lisbon restaurants"]
        assert await _titles(client, base, "?q=%20%20budget%20") == ["Budget 2027"]
        # % and _ are matched as themselves, not as wildcards.
        assert await _titles(client, base, "?q=100%25") == ["100% sure_thing"]
        assert await _titles(client, base, "?q=p_t") == []  # as a wildcard, "p t" in "Trip to Lisbon"
        assert await _titles(client, base, "?q=nothing-like-it") == []
        assert len(await _titles(client, base)) == 4
        assert await _titles(client, base, "?q=lisbon", headers=other_org()) == ["Lisbon in another org"]
        assert await _titles(client, base, "?q=lisbon&limit=1&offset=1") == ["Trip to Lisbon"]
        too_long = await client.get(f"{base}/conversations?q={'x' * 201}", headers=auth("alice"))
        assert too_long.status_code == 422
        capped = await client.get(f"{base}/conversations?limit=101", headers=auth("alice"))
        assert capped.status_code == 422


async def test_the_same_user_in_another_organisation_cannot_open_it(database_url: str) -> None:
    async with running(make_settings(database_url)) as (base, _app), httpx.AsyncClient() as client:
        conv = await new_conversation(client, base, "alice")
        url = f"{base}/conversations/{conv['id']}"
        for path in ("", "/messages", "/agent-session", "/agent-questions"):
            assert (await client.get(url + path, headers=other_org())).status_code == 404, path
            assert (await client.get(url + path, headers=auth("mallory"))).status_code == 404, path
        posted = await client.post(f"{url}/messages", json={"content": "hi"}, headers=other_org())
        assert posted.status_code == 404
        ws = await websockets.connect(url.replace("http://", "ws://") + "/ws", additional_headers=other_org())
        try:
            await ws.recv()
            raise AssertionError("another organisation's WebSocket stayed open")
        except websockets.ConnectionClosed as closed:
            assert closed.rcvd.code == 1008
        finally:
            await ws.close()


async def test_a_streaming_message_is_listed_with_its_text_so_far(database_url: str) -> None:
    async with running(make_settings(database_url)) as (base, app), httpx.AsyncClient() as client:
        conv = await new_conversation(client, base, "alice")
        cid = conv["id"]
        emit = app.state.realtime.publisher.emit
        async with transaction(app.state.storage.sessionmaker) as session:
            older = Message(conversation_id=cid, role=MessageRole.ASSISTANT.value, content="done earlier",
                            created_at=utcnow() - timedelta(seconds=5))
            reply = Message(conversation_id=cid, role=MessageRole.ASSISTANT.value, content="",
                            status=MessageStatus.STREAMING.value)
            session.add_all([older, reply])
        await emit(cid, MessageCreated({"id": reply.id, "role": "assistant", "status": "streaming"}))
        texts = ["Hel", "lo, ", "wor", "ld"]
        for i, text in enumerate(texts):
            await emit(cid, MessageDelta(reply.id, text))
            # Another message's deltas between them belong to that message only.
            await emit(cid, MessageDelta(older.id, f"<{i}>"))
        last = await emit(cid, MessageDelta(reply.id, "!"))
        await app.state.realtime.writer.flush()

        items = (await client.get(f"{base}/conversations/{cid}/messages", headers=auth("alice"))).json()["items"]
        by_id = {m["id"]: m for m in items}
        assert by_id[reply.id]["content"] == "Hello, world!"
        assert by_id[reply.id]["content_seq"] == last.seq
        assert by_id[reply.id]["status"] == "streaming"
        assert by_id[older.id]["content"] == "done earlier" and by_id[older.id]["content_seq"] is None

        # Small reads of the log (one frame at a time) find the same text.
        async with transaction(app.state.storage.sessionmaker) as session:
            assert await FrameRepository(session).streamed_text(
                cid, reply.id, started_at=utcnow() - timedelta(minutes=1), batch=1
            ) == ("Hello, world!", last.seq)

        # Without its created frame (never persisted), the read stops at frames older than the
        # message: a frame from before it cannot be part of it.
        async with transaction(app.state.storage.sessionmaker) as session:
            session.add_all([
                ConversationFrame(conversation_id=cid, seq=last.seq + 1, type=FrameType.MESSAGE_DELTA,
                                  data={"message_id": "m-lost", "text": "stale "},
                                  created_at=utcnow() - timedelta(minutes=10)),
                ConversationFrame(conversation_id=cid, seq=last.seq + 2, type=FrameType.MESSAGE_DELTA,
                                  data={"message_id": "m-lost", "text": "fresh"}, created_at=utcnow()),
            ])
        async with transaction(app.state.storage.sessionmaker) as session:
            assert await FrameRepository(session).streamed_text(
                cid, "m-lost", started_at=utcnow() - timedelta(minutes=1)
            ) == ("fresh", last.seq + 2)


async def test_the_agents_questions_and_how_each_stands(database_url: str) -> None:
    async with running(make_settings(database_url)) as (base, app), httpx.AsyncClient() as client:
        conv = await new_conversation(client, base, "alice")
        cid = conv["id"]
        now = utcnow()
        async with transaction(app.state.storage.sessionmaker) as session:
            row = ConversationAgentSession(conversation_id=cid, agent_session_id="as-1", status="AWAITING_USER")
            session.add(row)
            await session.flush()
            answer = Message(conversation_id=cid, role=MessageRole.USER.value, content="approve")
            session.add(answer)
            await session.flush()
            for i, (status, expires, answered) in enumerate((
                (InteractionStatus.ANSWERED, now + timedelta(minutes=5), answer.id),
                (InteractionStatus.EXPIRED, now - timedelta(minutes=1), None),
                (InteractionStatus.PENDING, now - timedelta(seconds=1), None),  # past due, not yet marked
                (InteractionStatus.PENDING, now + timedelta(minutes=5), None),
            )):
                session.add(PendingInteraction(
                    question_id=f"q-{i}", conversation_id=cid, agent_session_row_id=row.id, agent_session_id="as-1",
                    kind="approval" if i == 0 else "question", question=f"question {i}",
                    tool="calculator" if i == 0 else None, args={"expression": "1+1"} if i == 0 else None,
                    asked_at=now - timedelta(minutes=10 - i), expires_at=expires, status=status.value,
                    answer_message_id=answered,
                ))
        r = await client.get(f"{base}/conversations/{cid}/agent-questions", headers=auth("alice"))
        assert r.status_code == 200, r.text
        items = r.json()["items"]
        assert [(q["question_id"], q["status"]) for q in items] == [
            ("q-0", "ANSWERED"), ("q-1", "EXPIRED"), ("q-2", "EXPIRED"), ("q-3", "PENDING")
        ]
        assert items[0]["answer_message_id"] == answer.id
        assert items[0]["kind"] == "approval" and items[0]["tool"] == "calculator"
        assert items[0]["args"] == {"expression": "1+1"}
        latest = await client.get(f"{base}/conversations/{cid}/agent-questions?limit=2", headers=auth("alice"))
        assert [q["question_id"] for q in latest.json()["items"]] == ["q-2", "q-3"]
        assert (await client.get(f"{base}/conversations/{cid}/agent-questions?limit=0",
                                 headers=auth("alice"))).status_code == 422
