"""The Agent Service takes access tokens of the identity provider for its own audience (client
credentials), besides API keys; the ConversationService can call it with its own such token, so the
services share no key. Against a real OpenID Provider on loopback."""

from __future__ import annotations

import httpx
import pytest
import websockets

from agent_service.app import create_app as create_agent_app
from agent_service.settings import AgentOIDCSettings, AgentServiceSettings
from conversation_service.settings.delegation import DelegationSettings
from shared.llm.builtin import BuiltinProvider
from tests.integration.conversation_service.auth.support import oidc_settings
from tests.integration.conversation_service.support import collect_until, make_settings, running, ws_url
from tests.support.oidc_provider import (
    AGENT_AUDIENCE,
    AGENT_CALLER,
    AGENT_RESOURCE,
    CHAT_ONLY,
    CHAT_RESOURCE,
    OpenIDProvider,
    running_provider,
)
from tests.support.servers import serve_app

KEY = "an-api-key-still-accepted-0123456789"


@pytest.fixture(scope="module")
async def provider(tmp_path_factory):
    async with running_provider(tmp_path_factory.mktemp("op")) as provider:
        yield provider


def agent_app(tmp_path, provider: OpenIDProvider, api_keys: list[str], service_clients: list[str] = ()):
    settings = AgentServiceSettings(
        database_url=f"sqlite+aiosqlite:///{tmp_path}/agent.db", api_keys=api_keys, migrate_on_start=True,
        knowledge_dir=tmp_path / "no-docs",
        auth_oidc=AgentOIDCSettings(issuer=provider.issuer, audience=AGENT_AUDIENCE),
        auth_service_clients=list(service_clients),
    )
    return create_agent_app(settings, provider=BuiltinProvider(first_token_delay=0, chunk_delay=0))


async def test_the_agent_service_takes_tokens_for_its_own_audience(tmp_path, provider: OpenIDProvider) -> None:
    async with serve_app(agent_app(tmp_path, provider, [KEY])) as url, httpx.AsyncClient(base_url=url) as http:
        right = await provider.client_credentials(AGENT_CALLER, AGENT_RESOURCE)
        wrong = await provider.client_credentials(CHAT_ONLY, CHAT_RESOURCE)  # a token for the chat's API
        ok = await http.get("/api/v1/agent/profiles", headers={"Authorization": f"Bearer {right}"})
        assert ok.status_code == 200 and {p["name"] for p in ok.json()} >= {"default"}
        refused = await http.get("/api/v1/agent/profiles", headers={"Authorization": f"Bearer {wrong}"})
        assert refused.status_code == 401
        assert refused.json() == {"error": "unauthorized", "detail": "the token is for another audience"}
        assert refused.headers["www-authenticate"].startswith("Bearer")
        missing = await http.get("/api/v1/agent/profiles")
        assert missing.json()["detail"] == "missing or invalid X-API-Key or bearer token"
        # The API key keeps working beside the tokens; a wrong key is not rescued by a good token.
        assert (await http.get("/api/v1/agent/profiles", headers={"X-API-Key": KEY})).status_code == 200
        both = await http.get("/api/v1/agent/profiles", headers={"X-API-Key": "wrong", "Authorization": f"Bearer {right}"})
        assert both.status_code == 401


@pytest.mark.parametrize("a_service", [True, False], ids=["allowed-service", "not-a-service"])
async def test_the_chat_delegates_with_its_own_token_and_no_shared_key(
    tmp_path, provider: OpenIDProvider, a_service: bool,
) -> None:
    """The chat's client is a service of the Agent Service only when the operator says so
    (AGENT_SERVICE_AUTH_SERVICE_CLIENTS): else its token is a user's, which may not act for alice."""
    clients = [AGENT_CALLER.client_id] if a_service else []
    async with serve_app(agent_app(tmp_path, provider, [], clients)) as agent_url:
        settings = make_settings(
            f"sqlite+aiosqlite:///{tmp_path}/chat.db", agent_service_url=agent_url,
            agent_service_client_id=AGENT_CALLER.client_id, agent_service_client_secret=AGENT_CALLER.secret,
            agent_service_grant_params=f"resource={AGENT_RESOURCE}", oidc=oidc_settings(provider),
            delegation=DelegationSettings(agent_retry_delays_s="0.01", agent_reconnect_delays_s="0.01"),
        )
        user = await provider.user_token("alice")
        headers = {"Authorization": f"Bearer {user}"}
        async with running(settings) as (chat, _app), httpx.AsyncClient(base_url=chat, timeout=30) as http:
            conversation = (await http.post("/conversations", json={}, headers=headers)).json()["id"]
            async with websockets.connect(ws_url(chat, conversation), additional_headers=headers) as ws:
                posted = await http.post(f"/conversations/{conversation}/messages",
                                         json={"content": "/agent what is 17*23"}, headers=headers)
                assert posted.status_code == 202 and posted.json()["route"]["target"] == "agent", posted.text
                frames = await collect_until(ws, lambda f: f["type"] in ("message.completed", "message.error"))
            if not a_service:
                assert frames[-1]["type"] == "message.error" and frames[-1]["data"]["code"] == "AgentAuthError"
                return
            assert frames[-1]["type"] == "message.completed", frames[-1]
            assert "391" in frames[-1]["data"]["content"]
            assert not [f for f in frames if f["type"] == "notice"]  # the agent answered, not the fallback


async def test_the_a2a_routes_take_the_same_tokens_and_the_card_says_so(tmp_path, provider: OpenIDProvider) -> None:
    async with serve_app(agent_app(tmp_path, provider, [KEY])) as url, httpx.AsyncClient(base_url=url) as http:
        right = await provider.client_credentials(AGENT_CALLER, AGENT_RESOURCE)
        wrong = await provider.client_credentials(CHAT_ONLY, CHAT_RESOURCE)
        message = {"message": {"role": "ROLE_USER", "parts": [{"text": "what is 17*23"}], "messageId": "cc-1"}}
        version = {"A2A-Version": "1.0"}
        sent = await http.post("/a2a/v1/message:send", json=message,
                               headers=version | {"Authorization": f"Bearer {right}"})
        assert sent.status_code == 200, sent.text
        assert sent.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        refused = await http.post("/a2a/jsonrpc", headers=version | {"Authorization": f"Bearer {wrong}"},
                                  json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}})
        assert refused.status_code == 401
        assert refused.json()["error"]["message"] == "the token is for another audience"

        card = (await http.get("/.well-known/agent-card.json")).json()
        assert card["securitySchemes"]["oidc"]["openIdConnectSecurityScheme"]["openIdConnectUrl"] == (
            f"{provider.issuer.rstrip('/')}/.well-known/openid-configuration"
        )
        assert card["securityRequirements"] == [{"schemes": {"apiKey": {"list": []}}}, {"schemes": {"oidc": {"list": []}}}]
