"""What an operator may configure for the identity provider, and what is refused at start-up."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agent_service.settings import AgentServiceSettings
from conversation_service.settings import ConversationSettings
from conversation_service.settings.auth import ChatOIDCSettings
from shared.oidc.settings import OIDCSettings

ISSUER = "https://idp.example.com/realms/acme"


def test_without_an_issuer_oidc_is_off() -> None:
    assert not OIDCSettings().enabled
    assert not OIDCSettings(issuer="  ").enabled  # an empty variable is unset


@pytest.mark.parametrize("algorithms", ["none", "HS256", "RS256,HS256", "HS512", "EdDSA,none", ""])
def test_symmetric_and_unsigned_algorithms_are_refused(algorithms: str) -> None:
    with pytest.raises(ValidationError):
        OIDCSettings(issuer=ISSUER, audience="chat", algorithms=algorithms)


def test_the_default_allowlist_is_rs256_and_es256() -> None:
    assert OIDCSettings(issuer=ISSUER, audience="chat").algorithms == ["RS256", "ES256"]
    assert OIDCSettings(issuer=ISSUER, audience="chat", algorithms="PS256, ES384").algorithms == ["PS256", "ES384"]


@pytest.mark.parametrize("issuer", ["http://idp.example.com", "ftp://idp.example.com", "https://idp.example.com?x=1",
                                    "idp.example.com"])
def test_an_issuer_is_https_except_on_loopback(issuer: str) -> None:
    with pytest.raises(ValidationError):
        OIDCSettings(issuer=issuer, audience="chat")
    assert OIDCSettings(issuer="http://127.0.0.1:8080", audience="chat").enabled


def test_an_issuer_needs_an_audience() -> None:
    with pytest.raises(ValidationError, match="audience"):
        OIDCSettings(issuer=ISSUER)


def test_each_service_reads_its_own_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTH_OIDC_ISSUER", ISSUER)
    monkeypatch.setenv("AUTH_OIDC_AUDIENCE", "chat-api")
    monkeypatch.setenv("AUTH_OIDC_ORG_CLAIM", "tid")
    monkeypatch.setenv("AGENT_SERVICE_AUTH_OIDC_ISSUER", ISSUER)
    monkeypatch.setenv("AGENT_SERVICE_AUTH_OIDC_AUDIENCE", "agent-api")
    chat, agent = ConversationSettings(), AgentServiceSettings()
    assert (chat.oidc.issuer, chat.oidc.audience, chat.oidc.org_claim) == (ISSUER, "chat-api", "tid")
    assert (agent.auth_oidc.issuer, agent.auth_oidc.audience, agent.auth_oidc.org_claim) == (ISSUER, "agent-api", "org")


def test_the_page_sign_in_is_a_confidential_client() -> None:
    with pytest.raises(ValidationError, match="CLIENT_SECRET"):
        ChatOIDCSettings(issuer=ISSUER, audience="chat", client_id="chat-page")
    with pytest.raises(ValidationError, match="AUTH_OIDC_ISSUER"):
        ChatOIDCSettings(client_id="chat-page", client_secret="s")
    with pytest.raises(ValidationError, match="openid"):
        ChatOIDCSettings(issuer=ISSUER, audience="chat", client_id="chat-page", client_secret="s", scopes="profile")
    assert ChatOIDCSettings(issuer=ISSUER, audience="chat", client_id="chat-page", client_secret="s").login_enabled


def test_client_credentials_to_the_agent_need_the_issuer_and_a_secret() -> None:
    with pytest.raises(ValidationError, match="AUTH_OIDC_ISSUER"):
        ConversationSettings(agent_service_client_id="chat", agent_service_client_secret="s")
    with pytest.raises(ValidationError, match="AGENT_SERVICE_CLIENT_SECRET"):
        ConversationSettings(agent_service_client_id="chat", oidc=ChatOIDCSettings(issuer=ISSUER, audience="chat"))
