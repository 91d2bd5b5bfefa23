"""An MCP server behind OAuth: the Agent Service gets its access token with client credentials at the
authorization server the server names (its protected resource metadata; only the configured issuer's),
the tests' OpenID Provider, and calls its tools; a wrong secret leaves the server unavailable with a clear
reason and the service running."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import jwt
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings

from tests.integration.agent_service.mcp.conftest import serve_http, until
from tests.support.mcp_server import build
from tests.support.models import CommandModel
from tests.support.oidc_provider import AGENT_CALLER, ProviderConfig, running_provider
from tests.support.servers import free_port

AUDIENCE = "mcp-ops"


class _Tokens:
    """The MCP server's check of a bearer token: an RS256 JWT of the provider, for this server."""

    def __init__(self, issuer: str, resource: str) -> None:
        self.issuer, self.resource = issuer, resource
        self.keys: dict[str, Any] = {}
        self.seen: list[dict[str, Any]] = []

    async def load(self) -> None:
        async with httpx.AsyncClient() as http:
            jwks = (await http.get(f"{self.issuer}/jwks")).json()
        self.keys = {key["kid"]: jwt.PyJWK(key) for key in jwks["keys"] if key.get("use", "sig") == "sig"}

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            kid = jwt.get_unverified_header(token)["kid"]
            claims = jwt.decode(token, self.keys[kid], algorithms=["RS256", "ES256"], audience=AUDIENCE,
                                issuer=self.issuer)
        except (jwt.PyJWTError, KeyError):
            return None
        self.seen.append(claims)
        return AccessToken(token=token, client_id=claims.get("client_id", ""), scopes=claims.get("scope", "").split(),
                           expires_at=claims.get("exp"), resource=self.resource, subject=claims.get("sub"),
                           claims=claims)


async def test_client_credentials_at_the_servers_authorization_server(
    agent_factory, profiles_file, events, tmp_path: Path, monkeypatch,
) -> None:
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    config = ProviderConfig(resources={resource: {"audience": AUDIENCE, "scope": "agent", "ttl": 300}})
    async with running_provider(tmp_path, config) as provider:
        tokens = _Tokens(provider.issuer, resource)
        await tokens.load()
        auth = AuthSettings(issuer_url=provider.issuer, resource_server_url=resource, required_scopes=["agent"],
                            validate_token_resource=True)
        oauth = {"client_id": AGENT_CALLER.client_id, "client_secret": {"from_env": "OPS_CLIENT_SECRET"},
                 "issuer": provider.issuer, "scope": "agent"}
        async with serve_http(build(events=events, auth=(auth, tokens)), port=port):
            async with httpx.AsyncClient() as http:
                refused = await http.post(resource, json={})
            assert refused.status_code == 401, "the server takes no call without a token"

            monkeypatch.setenv("OPS_CLIENT_SECRET", AGENT_CALLER.secret)
            server = {"name": "ops", "url": resource, "oauth": oauth}
            async with agent_factory(provider=CommandModel(), profiles_file=profiles_file,
                                     mcp_servers=[server]) as agent:
                run = await agent.execute('call ops_add {"a": 40, "b": 2}', body={"profile_name": "ops"})
                end = run.of_type("TOOL_END")[0].data
                assert end["ok"] is True and end["result"] == {"result": 42}
            assert tokens.seen and {claims["client_id"] for claims in tokens.seen} == {AGENT_CALLER.client_id}
            assert all(claims["aud"] == AUDIENCE for claims in tokens.seen)

            monkeypatch.setenv("OPS_CLIENT_SECRET", "not-the-secret")
            started = time.monotonic()
            async with agent_factory(provider=CommandModel(), profiles_file=profiles_file,
                                     mcp_servers=[server]) as agent:
                assert time.monotonic() - started < 15
                ops = agent.app.state.agent.mcp.connections["ops"]
                await until(lambda: ops.last_error, what="the failed connection's reason")
                report = (await agent.http.get("/ready")).json()["mcp_servers"]["ops"]
                run = await agent.execute('call ops_add {"a": 40, "b": 2}', body={"profile_name": "ops"})
    assert report["state"] in ("starting", "restarting") and report["last_error"]
    assert "not-the-secret" not in str(report)
    end = run.of_type("TOOL_END")[0].data
    assert end["ok"] is False and "ops" in end["error"]
