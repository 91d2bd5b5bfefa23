"""The page's sign-in (backend for the page): authorization code with PKCE at a real OpenID
Provider, an HttpOnly session cookie, tokens that stay on the server and are refreshed there, CSRF
on what changes something, the WebSocket on the cookie, logout here and at the provider."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import websockets
from sqlalchemy import select
from websockets.exceptions import InvalidStatus

from conversation_service.app import create_app
from conversation_service.auth.sealing import derive, lookup_id, unseal
from conversation_service.db.models import WebSession
from conversation_service.websocket.protocol import server_options
from shared.transactions import transaction
from tests.integration.conversation_service.auth.support import PageBrowser, chat_settings
from tests.integration.conversation_service.support import collect_until, make_settings, recv_frame, ws_url
from tests.support.oidc_provider import CHAT_CLIENT, ProviderConfig, running_provider
from tests.support.servers import free_port, serve_app

COOKIE = "__Host-taskforce_session"


@asynccontextmanager
async def signed_in_stack(tmp_path: Path, database_url: str, *, ttl: int = 300, session: dict | None = None
                          ) -> AsyncIterator[tuple[PageBrowser, Any]]:
    port = free_port()
    chat = f"http://127.0.0.1:{port}"
    async with running_provider(tmp_path, ProviderConfig(chat_url=chat, ttl=ttl)) as provider:
        settings = chat_settings(tmp_path, provider, login=True, session=session)
        settings = settings.model_copy(update={"conversation_database_url": database_url})
        app = create_app(settings)
        async with serve_app(app, port=port, **server_options(settings)):
            browser = PageBrowser(chat, provider)
            try:
                yield browser, app
            finally:
                await browser.aclose()


async def _row(app, secret: str) -> WebSession | None:
    async with transaction(app.state.storage.sessionmaker) as session:
        return (await session.execute(select(WebSession).where(WebSession.id == lookup_id(secret)))).scalar_one_or_none()


def _tokens(row: WebSession, secret: str) -> dict[str, str]:
    purpose = "taskforce session tokens"
    tokens = unseal(derive(secret, purpose), row.sealed_tokens, purpose)
    assert tokens is not None
    return tokens


async def test_sign_in_sets_an_httponly_cookie_and_keeps_the_tokens_on_the_server(tmp_path, database_url) -> None:
    async with signed_in_stack(tmp_path, database_url) as (browser, app):
        back = await browser.sign_in("alice", return_to="/#c=some-conversation")
        assert back.status_code == 303 and back.headers["location"] == "/#c=some-conversation"
        cookie = browser.cookies[COOKIE]
        assert cookie["httponly"] and cookie["secure"] and cookie["samesite"] == "lax" and cookie["path"] == "/"
        assert set(browser.cookies) == {COOKIE}  # the sign-in's own cookie is gone
        info = await browser.session()
        assert info["signed_in"] and info["mode"] == "oidc" and info["login"]
        assert info["user"] == {"id": "alice", "org": "acme", "name": "Alice Liddell"}
        assert len(info["csrf_token"]) >= 32
        # The server stores a hash of the cookie, and the tokens only sealed with a key it cannot rebuild.
        row = await _row(app, cookie.value)
        assert row is not None and row.id != cookie.value and cookie.value not in row.id
        assert b"eyJ" not in row.sealed_tokens and b"access_token" not in row.sealed_tokens
        tokens = _tokens(row, cookie.value)
        assert tokens["access_token"].startswith("eyJ") and tokens["refresh_token"] and tokens["id_token"]
        for answer in (back, await browser.chat_request("GET", "/auth/session")):
            assert tokens["access_token"] not in answer.text + str(answer.headers)


async def test_the_cookie_authenticates_rest_with_csrf_and_the_websocket_with_origin(tmp_path, database_url) -> None:
    async with signed_in_stack(tmp_path, database_url) as (browser, _app):
        await browser.sign_in("alice")
        csrf = (await browser.session())["csrf_token"]
        assert (await browser.chat_request("GET", "/conversations")).status_code == 200
        for headers in ({}, {"X-CSRF-Token": "forged"}, {"X-CSRF-Token": csrf, "Origin": "http://evil.example"}):
            refused = await browser.chat_request("POST", "/conversations", json={}, headers=headers)
            assert refused.status_code == 403 and refused.json()["error"] == "forbidden", headers
        created = await browser.chat_request("POST", "/conversations", json={},
                                             headers={"X-CSRF-Token": csrf, "Origin": browser.chat})
        assert created.status_code == 201
        conversation = created.json()["id"]
        cookie = browser.cookie_header()
        async with websockets.connect(ws_url(browser.chat, conversation),
                                      additional_headers={**cookie, "Origin": browser.chat}) as ws:
            posted = await browser.chat_request("POST", f"/conversations/{conversation}/messages",
                                                json={"content": "hello"}, headers={"X-CSRF-Token": csrf})
            assert posted.status_code == 202
            frames = await collect_until(ws, lambda f: f.get("type") == "message.created")
            assert frames[-1]["data"]["role"] == "user"
        with pytest.raises(InvalidStatus):  # another site's page cannot use the cookie
            await websockets.connect(ws_url(browser.chat, conversation),
                                     additional_headers={**cookie, "Origin": "http://evil.example"})


async def test_tokens_are_refreshed_on_the_server_and_the_socket_stays_open(tmp_path, database_url) -> None:
    ttl = 3
    async with signed_in_stack(tmp_path, database_url, ttl=ttl, session={"refresh_margin_s": 1}) as (browser, app):
        await browser.sign_in("alice")
        secret = browser.cookies[COOKIE].value
        first = await browser.session()
        csrf = first["csrf_token"]
        conversation = (await browser.chat_request("POST", "/conversations", json={},
                                                   headers={"X-CSRF-Token": csrf})).json()["id"]
        before = _tokens(await _row(app, secret), secret)
        async with websockets.connect(ws_url(browser.chat, conversation),
                                      additional_headers={**browser.cookie_header(), "Origin": browser.chat}) as ws:
            await asyncio.sleep(ttl + 1)  # past the first access token's expiry
            await ws.send(json.dumps({"type": "ping", "data": {}}))
            assert (await recv_frame(ws))["type"] == "pong"
        after = await browser.session()
        assert after["signed_in"] and after["expires_at"] > first["expires_at"]
        refreshed = _tokens(await _row(app, secret), secret)
        assert refreshed["access_token"] != before["access_token"]
        assert refreshed["refresh_token"] != before["refresh_token"]  # the provider rotates it


async def test_a_refresh_the_provider_refuses_ends_the_session(tmp_path, database_url) -> None:
    async with signed_in_stack(tmp_path, database_url, ttl=2, session={"refresh_margin_s": 1}) as (browser, app):
        await browser.sign_in("alice")
        secret = browser.cookies[COOKIE].value
        tokens = _tokens(await _row(app, secret), secret)
        revoked = await browser.op.post(f"{browser.provider.issuer}/token/revocation",
                                        auth=(CHAT_CLIENT.client_id, CHAT_CLIENT.secret),
                                        data={"token": tokens["refresh_token"], "token_type_hint": "refresh_token"})
        assert revoked.status_code == 200
        await asyncio.sleep(1.2)  # into the refresh margin
        ended = await browser.chat_request("GET", "/conversations")
        assert ended.status_code == 401 and "session ended" in ended.json()["detail"]
        assert await _row(app, secret) is None
        assert (await browser.session())["signed_in"] is False


async def test_logout_ends_the_session_here_and_at_the_provider(tmp_path, database_url) -> None:
    async with signed_in_stack(tmp_path, database_url, session={"socket_recheck_s": 0.5}) as (browser, app):
        await browser.sign_in("alice")
        secret = browser.cookies[COOKIE].value
        csrf = (await browser.session())["csrf_token"]
        conversation = (await browser.chat_request("POST", "/conversations", json={},
                                                   headers={"X-CSRF-Token": csrf})).json()["id"]
        tokens = _tokens(await _row(app, secret), secret)
        old_cookie = browser.cookie_header()
        open_tab = await websockets.connect(ws_url(browser.chat, conversation),
                                            additional_headers={**old_cookie, "Origin": browser.chat})
        assert (await browser.chat_request("POST", "/auth/logout")).status_code == 403  # no CSRF token
        out = await browser.chat_request("POST", "/auth/logout", headers={"X-CSRF-Token": csrf})
        assert out.status_code == 200 and COOKIE not in browser.cookies
        # A socket the session had open (another tab) is closed at its next check of the session.
        with pytest.raises(websockets.ConnectionClosed):
            await recv_frame(open_tab, timeout=5)
        assert (open_tab.close_code, open_tab.close_reason) == (1008, "session ended")
        redirect = urlsplit(out.json()["redirect"])
        assert f"{redirect.scheme}://{redirect.netloc}" == browser.provider.issuer
        query = parse_qs(redirect.query)
        assert query["post_logout_redirect_uri"] == [f"{browser.chat}/"] and query["id_token_hint"] == [tokens["id_token"]]
        # Signed out here: the old cookie opens nothing, on REST or on the WebSocket.
        assert (await browser.http.get(f"{browser.chat}/conversations", headers=old_cookie)).status_code == 401
        async with websockets.connect(ws_url(browser.chat, conversation),
                                      additional_headers={**old_cookie, "Origin": browser.chat}) as ws:
            with pytest.raises(websockets.ConnectionClosed):
                await recv_frame(ws)
        assert (ws.close_code, ws.close_reason) == (1008, "session ended")
        # ...and at the provider: its refresh token was revoked.
        refresh = await browser.op.post(f"{browser.provider.issuer}/token", auth=(CHAT_CLIENT.client_id, CHAT_CLIENT.secret),
                                        data={"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]})
        assert refresh.status_code == 400 and refresh.json()["error"] == "invalid_grant"
        # The provider's own logout page takes the browser back to the chat.
        confirm = await browser.op.get(out.json()["redirect"])
        assert confirm.status_code == 200 and "sign-out" in confirm.text.lower()


async def test_failed_sign_ins_go_back_to_the_page_with_a_reason(tmp_path, database_url) -> None:
    async with signed_in_stack(tmp_path, database_url) as (browser, _app):
        started = await browser.chat_request("GET", "/auth/login")
        assert started.status_code == 302
        wrong_state = await browser.chat_request("GET", "/auth/callback?code=abc&state=forged")
        assert wrong_state.headers["location"] == "/?signin_error=state"
        no_cookie = await browser.http.get(f"{browser.chat}/auth/callback?code=abc&state=x")
        assert no_cookie.headers["location"] == "/?signin_error=expired"
        await browser.chat_request("GET", "/auth/login")
        state = parse_qs(urlsplit(started.headers["location"]).query)["state"][0]
        assert state  # each sign-in has its own state
        # Another site as the place to go back to: the page's root instead.
        back = await browser.sign_in("alice", return_to="https://evil.example/steal")
        assert back.headers["location"] == "/"
        back = await browser.sign_in("alice", return_to="//evil.example/steal")
        assert back.headers["location"] == "/"


async def test_without_a_provider_the_page_keeps_its_development_sign_in(tmp_path) -> None:
    settings = make_settings(f"sqlite+aiosqlite:///{tmp_path}/chat.db")
    app = create_app(settings)
    async with serve_app(app, **server_options(settings)) as url, httpx.AsyncClient(base_url=url) as http:
        assert (await http.get("/auth/session")).json() == {
            "mode": "development", "login": False, "signed_in": False, "user": None, "csrf_token": None,
            "expires_at": None}
        assert (await http.get("/auth/login")).status_code == 404
