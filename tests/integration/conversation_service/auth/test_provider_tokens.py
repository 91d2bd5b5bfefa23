"""The chat API with the identity provider's access tokens, against a real OpenID Provider
(oidc-provider on loopback, RS256 and ES256 keys): what is accepted, what is refused and why."""

from __future__ import annotations

import base64
import json
import logging
import time

import httpx
import pytest
import websockets
from websockets.exceptions import InvalidStatus

from conversation_service.auth.tokens import issue_token
from conversation_service.settings import DEV_JWT_SECRET
from tests.integration.conversation_service.auth.support import chat_with_provider
from tests.integration.conversation_service.support import collect_until, recv_frame, ws_url
from tests.support.oidc_provider import (
    AGENT_CALLER,
    AGENT_RESOURCE,
    CHAT_AUDIENCE,
    CHAT_CLIENT,
    ES_TESTER,
    RS_TESTER,
    OpenIDProvider,
    make_key,
)

LEEWAY_S = 5.0


@pytest.fixture(scope="module")
async def chat(tmp_path_factory, provider):
    async with chat_with_provider(tmp_path_factory.mktemp("chat"), provider, leeway_s=LEEWAY_S) as (url, _app):
        yield url


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _b64(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


@pytest.mark.parametrize("client", [RS_TESTER, ES_TESTER], ids=["RS256", "ES256"])
async def test_rest_and_websocket_take_the_providers_tokens(provider: OpenIDProvider, chat: str, client) -> None:
    token = await provider.user_token("alice", client)
    assert json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "==")).get("alg") == (
        "ES256" if client is ES_TESTER else "RS256")
    async with httpx.AsyncClient(base_url=chat) as http:
        created = await http.post("/conversations", json={"title": "signed in"}, headers=bearer(token))
        assert created.status_code == 201, created.text
        conversation = created.json()["id"]
        # The organisation comes from the provider's claim (AUTH_OIDC_ORG_CLAIM): another
        # organisation's user does not see it.
        bob = await provider.user_token("bob", client)
        assert (await http.get(f"/conversations/{conversation}", headers=bearer(bob))).status_code == 404
        # Header auth, then first-frame auth (as browsers without a session cookie do).
        async with websockets.connect(ws_url(chat, conversation), additional_headers=bearer(token)) as ws:
            posted = await http.post(f"/conversations/{conversation}/messages", json={"content": "hello"},
                                     headers=bearer(token))
            assert posted.status_code == 202
            frames = await collect_until(ws, lambda f: f.get("type") == "message.created")
            assert frames[-1]["data"]["role"] == "user"
        async with websockets.connect(ws_url(chat, conversation, after_seq=0)) as ws:
            await ws.send(json.dumps({"type": "auth", "token": token}))
            assert (await recv_frame(ws))["type"] == "message.created"


def _expired(provider: OpenIDProvider) -> str:
    now = int(time.time())
    return provider.sign(provider.claims(iat=now - 600, exp=now - int(LEEWAY_S) - 5))


def _alg_none(provider: OpenIDProvider) -> str:
    return f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(provider.claims())}."


def _tampered(token: str) -> str:
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["sub"] = "mallory"
    return f"{header}.{_b64(claims)}.{signature}"


# Each way a token is made, and the check the answer names.
REFUSED = {
    "wrong audience": (lambda op: op.client_credentials(AGENT_CALLER, AGENT_RESOURCE), "another audience"),
    "wrong issuer": (lambda op: op.sign(op.claims(iss="http://127.0.0.1:1/another-issuer")), "another issuer"),
    "expired past the leeway": (_expired, "expired"),
    "not valid yet": (lambda op: op.sign(op.claims(nbf=int(time.time()) + 600)), "not valid yet"),
    "issued in the future": (lambda op: op.sign(op.claims(iat=int(time.time()) + 600)), "not valid yet"),
    "alg none": (_alg_none, "algorithm is not allowed"),
    "HS256 with the development secret": (lambda op: issue_token(DEV_JWT_SECRET, "alice", "acme"),
                                          "algorithm is not allowed"),
    "tampered payload": (lambda op: op.user_token("alice"), "signature does not verify"),
    "a key the provider does not have": (
        lambda op: op.sign(op.claims(), key=make_key("RS256", kid="not-at-the-op")), "does not have"),
    "ES256 header on the RSA key's id": (
        lambda op: op.sign(op.claims(), key=make_key("ES256", kid=op.keys[0].kid)), "does not fit its key"),
}


@pytest.mark.parametrize("case", list(REFUSED))
async def test_refused_tokens(provider: OpenIDProvider, chat: str, case: str) -> None:
    make, check = REFUSED[case]
    made = make(provider)
    token = await made if hasattr(made, "__await__") else made
    if case == "tampered payload":
        token = _tampered(token)
    async with httpx.AsyncClient(base_url=chat) as http:
        refused = await http.get("/conversations", headers=bearer(token))
        assert refused.status_code == 401, (case, refused.text)
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert refused.json()["error"] == "unauthorized" and check in refused.json()["detail"]
        conversation = (await http.post("/conversations", json={}, headers=bearer(await provider.user_token()))).json()
    with pytest.raises(InvalidStatus) as handshake:
        await websockets.connect(ws_url(chat, conversation["id"]), additional_headers=bearer(token))
    assert handshake.value.response.status_code == 403  # the handshake refused (close 1008 before accept)
    async with websockets.connect(ws_url(chat, conversation["id"])) as ws:
        await ws.send(json.dumps({"type": "auth", "token": token}))
        with pytest.raises(websockets.ConnectionClosed):
            await recv_frame(ws)
    assert ws.close_code == 1008


async def test_within_the_leeway_a_token_is_still_accepted(provider: OpenIDProvider, chat: str) -> None:
    now = int(time.time())
    token = provider.sign(provider.claims(iat=now - 600, exp=now - int(LEEWAY_S / 2)), alg="ES256")
    async with httpx.AsyncClient(base_url=chat) as http:
        assert (await http.get("/conversations", headers=bearer(token))).status_code == 200


async def test_metrics_count_refusals_by_check(provider: OpenIDProvider, chat: str) -> None:
    async with httpx.AsyncClient(base_url=chat) as http:
        before = await http.get("/metrics")
        await http.get("/conversations", headers=bearer(_alg_none(provider)))
        after = await http.get("/metrics")

    def count(text: str) -> float:
        line = next(x for x in text.splitlines()
                    if x.startswith('conversation_oidc_tokens_rejected_total{reason="algorithm"}'))
        return float(line.split()[-1])

    assert count(after.text) == count(before.text) + 1


@pytest.mark.parametrize("marked", [False, True], ids=["by-its-claims", "by-the-access-token-typ"])
async def test_an_id_token_is_not_a_bearer_token_even_for_the_apis_audience(
    tmp_path, provider: OpenIDProvider, marked: bool,
) -> None:
    """The sign-in client's id is the API's audience here (a single-app registration, as at Entra ID):
    its ID token names the API as audience, and is still refused wherever a bearer is taken, REST and
    WebSocket, by what only ID tokens carry (its nonce) or, where the provider marks access tokens
    (``typ: at+jwt``), by the missing mark. The access token of the same sign-in works."""
    assert CHAT_CLIENT.client_id == CHAT_AUDIENCE
    extra = {"access_token_typ": "at+jwt"} if marked else {}
    async with chat_with_provider(tmp_path, provider, **extra) as (chat, _app):
        tokens = await provider.user_tokens("alice", CHAT_CLIENT)
        assert _claims(tokens["id_token"])["aud"] == CHAT_AUDIENCE
        async with httpx.AsyncClient(base_url=chat) as http:
            created = await http.post("/conversations", json={"title": "mine"}, headers=bearer(tokens["access_token"]))
            assert created.status_code == 201, created.text
            for method, path in (("GET", "/conversations"), ("POST", "/conversations"),
                                 ("GET", f"/conversations/{created.json()['id']}")):
                refused = await http.request(method, path, json={} if method == "POST" else None,
                                             headers=bearer(tokens["id_token"]))
                assert refused.status_code == 401, (method, path, refused.text)
                assert "ID token" in refused.json()["detail"] and "Alice" not in refused.text
        url = ws_url(chat, created.json()["id"])
        with pytest.raises(InvalidStatus):  # refused in the handshake
            await websockets.connect(url, additional_headers=bearer(tokens["id_token"]))
        async with websockets.connect(url) as ws:  # or as the first frame, as a browser sends it
            await ws.send(json.dumps({"type": "auth", "token": tokens["id_token"]}))
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await recv_frame(ws)
        assert closed.value.rcvd.code == 1008


async def test_a_token_that_carries_an_id_tokens_claims_is_refused(provider: OpenIDProvider, chat: str) -> None:
    """Signed by the provider's own key for the API's audience, with a nonce or at_hash, or Keycloak's
    ``typ: ID``: an ID token, whatever else it says."""
    async with httpx.AsyncClient(base_url=chat) as http:
        for marker in ({"nonce": "n-0123"}, {"at_hash": "x3fQ"}, {"c_hash": "y7tA"}, {"typ": "ID"}):
            token = provider.sign(provider.claims("alice", **marker))
            refused = await http.get("/conversations", headers=bearer(token))
            assert refused.status_code == 401 and "ID token" in refused.json()["detail"], (marker, refused.text)
        plain = provider.sign(provider.claims("alice"))
        assert (await http.get("/conversations", headers=bearer(plain))).status_code == 200


def _claims(token: str) -> dict:
    return json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))


async def test_the_start_up_warns_when_the_api_audience_is_the_sign_in_clients_id(
    tmp_path, provider: OpenIDProvider, caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="conversation_service.lifespan"):
        async with chat_with_provider(tmp_path / "same", provider, login=True):
            pass
    assert any("AUTH_OIDC_AUDIENCE equals AUTH_OIDC_CLIENT_ID" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="conversation_service.lifespan"):
        async with chat_with_provider(tmp_path / "own", provider, login=True, audience="https://chat-api.example"):
            pass
    assert not any("AUTH_OIDC_AUDIENCE equals" in r.getMessage() for r in caplog.records)
