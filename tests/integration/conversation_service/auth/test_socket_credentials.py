"""A chat WebSocket does not outlive its token: told before it expires, closed 1008 when it does,
unless a new token of the same user came in band."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
import websockets

from tests.integration.conversation_service.auth.support import chat_with_provider
from tests.integration.conversation_service.support import recv_frame, ws_url

# Long enough that a loaded machine still connects before expiry; the token is signed only once the
# conversation exists, so the round trip to the provider does not eat into it.
LIFETIME_S = 4


@pytest.fixture(scope="module")
async def chat(tmp_path_factory, provider):
    async with chat_with_provider(tmp_path_factory.mktemp("chat"), provider, leeway_s=0) as (url, _app):
        yield url


async def _conversation(chat: str, token: str) -> str:
    async with httpx.AsyncClient(base_url=chat) as http:
        created = await http.post("/conversations", json={}, headers={"Authorization": f"Bearer {token}"})
    assert created.status_code == 201, created.text
    return created.json()["id"]


def _short_lived(provider, user: str = "alice") -> tuple[str, int]:
    expires_at = int(time.time()) + LIFETIME_S
    return provider.sign(provider.claims(user, exp=expires_at)), expires_at


async def test_a_socket_is_told_and_closed_when_its_token_expires(provider, chat: str) -> None:
    conversation = await _conversation(chat, await provider.user_token())
    token, expires_at = _short_lived(provider)
    async with websockets.connect(ws_url(chat, conversation), additional_headers={"Authorization": f"Bearer {token}"}
                                  ) as ws:
        notice = await recv_frame(ws)
        assert notice == {"type": "auth.expiring", "data": {"expires_at": expires_at}}
        with pytest.raises(websockets.ConnectionClosed):
            await recv_frame(ws, timeout=LIFETIME_S + 5)
    assert (ws.close_code, ws.close_reason) == (1008, "token expired")
    assert time.time() >= expires_at


async def test_a_new_token_in_band_keeps_the_socket_open(provider, chat: str) -> None:
    conversation = await _conversation(chat, await provider.user_token())
    token, expires_at = _short_lived(provider)
    async with websockets.connect(ws_url(chat, conversation)) as ws:
        await ws.send(json.dumps({"type": "auth", "token": token}))
        assert (await recv_frame(ws))["type"] == "auth.expiring"
        fresh = await provider.user_token("alice")
        await ws.send(json.dumps({"type": "auth", "token": fresh}))
        renewed = await recv_frame(ws)
        assert renewed["type"] == "auth.ok" and renewed["data"]["expires_at"] > expires_at + 60
        await asyncio.sleep(max(0.0, expires_at - time.time()) + 0.5)  # past the first token's expiry
        await ws.send(json.dumps({"type": "ping", "data": {"n": 1}}))
        assert await recv_frame(ws) == {"type": "pong", "data": {"n": 1}}


@pytest.mark.parametrize("renewal", ["another user's token", "an invalid token"])
async def test_a_wrong_renewal_closes_the_socket(provider, chat: str, renewal: str) -> None:
    token = await provider.user_token("alice")
    conversation = await _conversation(chat, token)
    other = await provider.user_token("bob") if renewal == "another user's token" else token[:-4] + "AAAA"
    async with websockets.connect(ws_url(chat, conversation), additional_headers={"Authorization": f"Bearer {token}"}
                                  ) as ws:
        await ws.send(json.dumps({"type": "auth", "token": other}))
        with pytest.raises(websockets.ConnectionClosed):
            await recv_frame(ws)
    assert ws.close_code == 1008
