"""A conversation belongs to (organisation, user): a token with the owner's ``sub`` and another
``org`` (or none) is a stranger to it, on every REST route and on the WebSocket."""

from __future__ import annotations

import json

import httpx
import pytest
import websockets

from tests.integration.conversation_service.support import (
    make_settings,
    new_conversation,
    recv_frame,
    running,
    token,
    ws_url,
)

STRANGERS = {"same sub, other org": "globex", "same sub, no org": None}


def bearer(user: str, org: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(user, org)}"}


async def _ws_refused(url: str, headers: dict[str, str] | None = None, first_frame: str | None = None) -> int:
    async with websockets.connect(url, additional_headers=headers) as ws:
        if first_frame is not None:
            await ws.send(first_frame)
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await recv_frame(ws)
    return closed.value.rcvd.code


@pytest.mark.parametrize("org", STRANGERS.values(), ids=STRANGERS.keys())
async def test_same_user_id_in_another_organisation_is_a_stranger(database_url: str, org: str | None) -> None:
    async with running(make_settings(database_url)) as (base, _), httpx.AsyncClient() as client:
        conv = await new_conversation(client, base, "alice")  # alice of acme
        cid = conv["id"]
        stranger = bearer("alice", org)
        for method, path, body in (
            ("GET", f"/conversations/{cid}", None),
            ("GET", f"/conversations/{cid}/messages", None),
            ("POST", f"/conversations/{cid}/messages", {"content": "let me in"}),
            ("POST", f"/conversations/{cid}/agent-answer", {"question_id": "q", "answer": "yes"}),
            ("GET", f"/conversations/{cid}/agent-session", None),
        ):
            resp = await client.request(method, base + path, json=body, headers=stranger)
            assert resp.status_code == 404, (method, path, resp.status_code, resp.text)
            assert resp.json() == {"error": "not_found", "detail": "conversation not found"}
        assert (await client.get(f"{base}/conversations", headers=stranger)).json()["items"] == []

        url = ws_url(base, cid)
        assert await _ws_refused(url, headers=stranger) == 1008
        first_frame = json.dumps({"type": "auth", "token": token("alice", org)})
        assert await _ws_refused(url, first_frame=first_frame) == 1008

        # The owner still reads it, and nothing was written for the stranger.
        owner = bearer("alice", "acme")
        assert [c["id"] for c in (await client.get(f"{base}/conversations", headers=owner)).json()["items"]] == [cid]
        assert (await client.get(f"{base}/conversations/{cid}/messages", headers=owner)).json()["items"] == []


async def test_a_conversation_made_without_an_organisation_is_its_users_without_one(database_url: str) -> None:
    async with running(make_settings(database_url)) as (base, _), httpx.AsyncClient() as client:
        made = await client.post(f"{base}/conversations", json={"title": "t"}, headers=bearer("bob", None))
        assert made.status_code == 201 and made.json()["org_id"] is None
        cid = made.json()["id"]
        assert (await client.get(f"{base}/conversations/{cid}", headers=bearer("bob", None))).status_code == 200
        assert (await client.get(f"{base}/conversations/{cid}", headers=bearer("bob", "acme"))).status_code == 404
