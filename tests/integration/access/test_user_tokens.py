"""A user's token is that user, not a service credential: with an ordinary token of the identity provider
for the Agent Service's audience, a user reads their own sessions and memory and nobody else's (the
findings of issue 33, as an identity-provider user would try them). Only the settings every release has
(an API key, the provider), so the same test runs against a release without callers."""

from __future__ import annotations

import httpx

from agent_service.app import create_app
from agent_service.settings import AgentOIDCSettings, AgentServiceSettings
from shared.llm.builtin import BuiltinProvider
from tests.support.oidc_provider import (
    AGENT_AUDIENCE,
    AGENT_UI,
    ORG_CLAIM,
    PERMISSIONS_CLAIM,
    ProviderConfig,
    running_provider,
)
from tests.support.servers import serve_app

KEY = "the-chats-key-0123456789"
USERS = {"alice": {"password": "wonderland", "org": "acme"}, "bob": {"password": "builder", "org": "acme"}}


async def test_a_user_token_sees_its_own_sessions_and_memory_only(tmp_path) -> None:
    async with running_provider(tmp_path, ProviderConfig(users=USERS)) as provider:
        settings = AgentServiceSettings(
            database_url=f"sqlite+aiosqlite:///{tmp_path}/agent.db", api_keys=[KEY], migrate_on_start=True,
            knowledge_dir=tmp_path / "no-docs",
            auth_oidc=AgentOIDCSettings(issuer=provider.issuer, audience=AGENT_AUDIENCE, org_claim=ORG_CLAIM,
                                        permissions_claim=PERMISSIONS_CLAIM),
        )
        app = create_app(settings, provider=BuiltinProvider(first_token_delay=0, chunk_delay=0))
        alice = {"Authorization": f"Bearer {await provider.user_token('alice', AGENT_UI)}"}
        bob = {"Authorization": f"Bearer {await provider.user_token('bob', AGENT_UI)}"}
        async with serve_app(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
            # The chat (its key) starts alice's session; she told the agent something of hers.
            started = await http.post("/api/v1/agent/execute", headers={"X-API-Key": KEY}, json={
                "profile_name": "default", "message": "my name is Alice Secretname",
                "user_context": {"user_id": "alice", "org_id": "acme"}})
            assert started.status_code == 200, started.text
            session = started.headers["X-Session-ID"]
            memory = {"user_id": "alice", "org_id": "acme"}

            assert (await http.get(f"/api/v1/agent/sessions/{session}", headers=alice)).status_code == 200
            peeked = await http.get(f"/api/v1/agent/sessions/{session}", headers=bob)
            assert peeked.status_code == 404 and "Secretname" not in peeked.text
            events = await http.get(f"/api/v1/agent/sessions/{session}/events", headers=bob)
            assert events.status_code == 404 and "Secretname" not in events.text

            assert (await http.get("/api/v1/agent/memory", params=memory, headers=alice)).status_code == 200
            memories = await http.get("/api/v1/agent/memory", params=memory, headers=bob)
            assert memories.status_code == 403 and "Secretname" not in memories.text
            # Nor may bob run in alice's name, in her session or a new one.
            as_alice = await http.post("/api/v1/agent/execute", headers=bob, json={
                "session_id": session, "profile_name": "default", "message": "what is my name?",
                "user_context": {"user_id": "alice", "org_id": "acme"}})
            assert as_alice.status_code == 403 and "Secretname" not in as_alice.text
            as_himself = await http.post("/api/v1/agent/execute", headers=bob, json={
                "session_id": session, "profile_name": "default", "message": "what is my name?",
                "user_context": {"user_id": "bob", "org_id": "acme"}})
            assert as_himself.status_code == 404 and "Secretname" not in as_himself.text
