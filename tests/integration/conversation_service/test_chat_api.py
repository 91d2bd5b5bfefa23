"""REST and WebSocket of the chat API against a real server on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os

import httpx
import pytest
import websockets

from tests.integration.conversation_service.support import (
    auth,
    collect_until,
    connect,
    make_settings,
    new_conversation,
    recv_frame,
    running,
)

# tests.support.servers runs uvicorn with its legacy websockets implementation, deprecated upstream.

# The built-in model answers at once in tests.
os.environ.setdefault("LLM_BUILTIN_FIRST_TOKEN_MS", "0")
os.environ.setdefault("LLM_BUILTIN_CHUNK_DELAY_MS", "0")


def _completed(frame: dict) -> bool:
    return frame["type"] == "message.completed"


async def test_rest_crud_and_idempotent_client_message_id(database_url: str) -> None:
    async with running(make_settings(database_url)) as (base, app), httpx.AsyncClient() as client:
        conv = await new_conversation(client, base, "alice", "first")
        assert conv["title"] == "first" and conv["owner_id"] == "alice" and conv["org_id"] == "acme"

        listed = (await client.get(f"{base}/conversations", headers=auth("alice"))).json()
        assert [c["id"] for c in listed["items"]] == [conv["id"]]
        got = await client.get(f"{base}/conversations/{conv['id']}", headers=auth("alice"))
        assert got.status_code == 200 and got.json()["id"] == conv["id"]

        body = {"content": "hello there", "client_message_id": "c-1"}
        first = await client.post(f"{base}/conversations/{conv['id']}/messages", json=body, headers=auth("alice"))
        assert first.status_code == 202, first.text
        accepted = first.json()
        assert accepted["route"] == {"target": "direct_llm", "reason": "routing_disabled"}
        assert accepted["duplicate"] is False
        await app.state.tasks.join()

        again = await client.post(f"{base}/conversations/{conv['id']}/messages", json=body, headers=auth("alice"))
        assert again.status_code == 202
        assert again.json()["message_id"] == accepted["message_id"]
        assert again.json()["duplicate"] is True
        assert again.json()["route"] == accepted["route"]
        await app.state.tasks.join()

        messages = (await client.get(f"{base}/conversations/{conv['id']}/messages", headers=auth("alice"))).json()
        roles = [(m["role"], m["status"]) for m in messages["items"]]
        # One user message and one reply: the repeat created nothing.
        assert roles == [("user", "complete"), ("assistant", "complete")]
        assert messages["items"][0]["content"] == "hello there"
        assert messages["items"][1]["content"]

        too_big = await client.post(
            f"{base}/conversations/{conv['id']}/messages", json={"content": "x" * 40_000}, headers=auth("alice")
        )
        assert too_big.status_code == 413 and too_big.json()["error"] == "payload_too_large"
        huge = await client.post(
            f"{base}/conversations/{conv['id']}/messages", content=b"{" + b" " * 300_000 + b"}",
            headers={**auth("alice"), "content-type": "application/json"},
        )
        assert huge.status_code == 413
        invalid = await client.post(f"{base}/conversations/{conv['id']}/messages", json={"content": ""}, headers=auth("alice"))
        assert invalid.status_code == 422 and invalid.json()["error"] == "validation_error"
        unknown = await client.get(f"{base}/conversations/nope", headers=auth("alice"))
        assert unknown.status_code == 404 and unknown.json() == {"error": "not_found", "detail": "conversation not found"}


async def test_a_message_too_large_is_413_whatever_its_size(database_url: str) -> None:
    # 40 kB fails the configured limit (32,000 characters); 210 kB passes the request body cap
    # (256 KiB) but fails the contract's outer cap (200,000): both are too large, neither is 422.
    async with running(make_settings(database_url)) as (base, _), httpx.AsyncClient() as client:
        conv = await new_conversation(client, base, "alice")
        for chars in (40_000, 210_000):
            for path, body in (
                ("messages", {"content": "x" * chars}),
                ("agent-answer", {"question_id": "q", "answer": "x" * chars}),
            ):
                resp = await client.post(f"{base}/conversations/{conv['id']}/{path}", json=body, headers=auth("alice"))
                assert resp.status_code == 413, (path, chars, resp.text[:300])
                assert resp.json()["error"] == "payload_too_large"
        messages = (await client.get(f"{base}/conversations/{conv['id']}/messages", headers=auth("alice"))).json()
        assert messages["items"] == []


async def test_plain_message_streams_a_direct_reply(database_url: str) -> None:
    async with running(make_settings(database_url)) as (base, _app), httpx.AsyncClient() as client:
        conv = await new_conversation(client, base, "alice")
        async with await connect(base, conv["id"], "alice") as ws:
            r = await client.post(f"{base}/conversations/{conv['id']}/messages",
                                  json={"content": "Tell me about the weather"}, headers=auth("alice"))
            assert r.status_code == 202
            frames = await collect_until(ws, _completed)
        types = [f["type"] for f in frames]
        assert types[0] == "message.created" and frames[0]["data"]["role"] == "user"
        assert types[1] == "message.created" and frames[1]["data"]["role"] == "assistant"
        assert frames[1]["data"]["status"] == "streaming"
        deltas = [f["data"]["text"] for f in frames if f["type"] == "message.delta"]
        assert deltas, types
        assert frames[-1]["data"]["content"] == "".join(deltas)
        seqs = [f["seq"] for f in frames]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        assert all(f["conversation_id"] == conv["id"] for f in frames)
        stored = (await client.get(f"{base}/conversations/{conv['id']}/messages", headers=auth("alice"))).json()
        assert stored["items"][-1]["content"] == "".join(deltas)
        assert stored["items"][-1]["status"] == "complete"


async def test_after_seq_replays_exactly_once_across_a_reconnect(database_url: str) -> None:
    async with running(make_settings(database_url)) as (base, _app), httpx.AsyncClient() as client:
        conv = await new_conversation(client, base, "alice")
        # A reference client sees the whole conversation live.
        async with await connect(base, conv["id"], "alice", after_seq=0) as reference:
            seen: list[dict] = []
            async with await connect(base, conv["id"], "alice", after_seq=0) as ws:
                await client.post(f"{base}/conversations/{conv['id']}/messages",
                                  json={"content": "one two three four five six seven"}, headers=auth("alice"))
                # Leave in the middle of the reply.
                while len(seen) < 4:
                    seen.append(await recv_frame(ws))
            everything = await collect_until(reference, _completed)
            async with await connect(base, conv["id"], "alice", after_seq=seen[-1]["seq"]) as ws:
                rest = await collect_until(ws, _completed)
                await client.post(f"{base}/conversations/{conv['id']}/messages",
                                  json={"content": "and again"}, headers=auth("alice"))
                live = await collect_until(ws, _completed)
            everything += await collect_until(reference, _completed)
        resumed = seen + rest + live
        assert [f["seq"] for f in resumed] == [f["seq"] for f in everything]
        assert resumed == everything
        assert len({f["seq"] for f in resumed}) == len(resumed)


async def test_websocket_auth_and_origin(database_url: str) -> None:
    settings = make_settings(database_url, ws_auth_timeout_s=0.5, ws_allowed_origins="https://chat.example")
    async with running(settings) as (base, _app), httpx.AsyncClient() as client:
        conv = await new_conversation(client, base, "alice")
        url = base.replace("http://", "ws://") + f"/conversations/{conv['id']}/ws"

        # Missing token: REST 401; WS waits for the auth frame, then closes 1008.
        assert (await client.get(f"{base}/conversations")).status_code == 401
        bad = await client.get(f"{base}/conversations", headers={"Authorization": "Bearer nope"})
        assert bad.status_code == 401 and bad.json()["error"] == "unauthorized"
        async with websockets.connect(url) as ws:
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await recv_frame(ws, timeout=5)
            assert closed.value.rcvd.code == 1008  # auth timeout

        # Invalid header token: refused in the handshake.
        with pytest.raises(websockets.InvalidStatus):
            await websockets.connect(url, additional_headers={"Authorization": "Bearer garbage"})

        # First-frame auth (the browser way), then a ping.
        from tests.integration.conversation_service.support import token
        async with websockets.connect(url, origin="https://chat.example") as ws:
            await ws.send(json.dumps({"type": "auth", "token": token("alice")}))
            await ws.send('{"type": "ping"}')
            assert (await recv_frame(ws))["type"] == "pong"
        async with websockets.connect(url) as ws:
            await ws.send('{"type": "auth", "token": "wrong"}')
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await recv_frame(ws)
            assert closed.value.rcvd.code == 1008

        # A foreign page's origin is refused before the upgrade.
        with pytest.raises(websockets.InvalidStatus):
            await websockets.connect(url, origin="https://evil.example", additional_headers=auth("alice"))


async def test_bola_second_user_cannot_touch_first_users_conversation(database_url: str) -> None:
    async with running(make_settings(database_url)) as (base, _app), httpx.AsyncClient() as client:
        conv = await new_conversation(client, base, "alice")
        cid = conv["id"]
        for method, path, body in (
            ("GET", f"/conversations/{cid}", None),
            ("GET", f"/conversations/{cid}/messages", None),
            ("POST", f"/conversations/{cid}/messages", {"content": "let me in"}),
        ):
            r = await client.request(method, base + path, json=body, headers=auth("mallory"))
            assert r.status_code == 404, (method, path, r.status_code)
            assert r.json()["error"] == "not_found"
        assert (await client.get(f"{base}/conversations", headers=auth("mallory"))).json()["items"] == []
        async with await connect(base, cid, "mallory") as ws:
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await recv_frame(ws)
            assert closed.value.rcvd.code == 1008
        # Nothing was written for mallory.
        msgs = (await client.get(f"{base}/conversations/{cid}/messages", headers=auth("alice"))).json()["items"]
        assert msgs == []


async def test_message_send_over_websocket(database_url: str) -> None:
    async with running(make_settings(database_url)) as (base, _app), httpx.AsyncClient() as client:
        conv = await new_conversation(client, base, "alice")
        async with await connect(base, conv["id"], "alice") as ws:
            await ws.send('{"type": "message.send", "data": {"content": "hi over ws", "client_message_id": "w1"}}')
            await ws.send('{"type": "something.new"}')
            frames = await collect_until(ws, _completed)
        acks = [f for f in frames if f["type"] == "ack"]
        assert len(acks) == 1 and acks[0]["data"]["route"]["target"] == "direct_llm"
        user_created = [f for f in frames if f["type"] == "message.created" and f["data"]["role"] == "user"]
        assert user_created[0]["data"]["content"] == "hi over ws"
