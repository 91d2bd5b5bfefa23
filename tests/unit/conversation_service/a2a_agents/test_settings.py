"""A2A_AGENTS, A2A_DEFAULT_AGENT, A2A_ORG_AGENTS: read from the environment, refused with a sentence
that says which agent and what is wrong."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from conversation_service.settings import ConversationSettings
from conversation_service.settings.a2a_agents import A2AAgentConfig, A2AAgentsSettings

CARD = "https://research.example.com/.well-known/agent-card.json"


def test_agents_come_from_the_environment_as_json(monkeypatch) -> None:
    monkeypatch.setenv("A2A_AGENTS", json.dumps([
        {"name": "research", "card_url": CARD, "bearer_token": "t0k3n"},
        {"name": "planner", "card_url": "http://planner:8080/.well-known/agent-card.json", "api_key": "k3y",
         "api_key_header": "X-Planner-Key", "binding": "HTTP+JSON"},
    ]))
    monkeypatch.setenv("A2A_DEFAULT_AGENT", "research")
    monkeypatch.setenv("A2A_ORG_AGENTS", json.dumps({"acme": "planner"}))
    settings = ConversationSettings().a2a
    research, planner = settings.agents
    assert research.auth_headers() == {"Authorization": "Bearer t0k3n"}
    assert planner.auth_headers() == {"X-Planner-Key": "k3y"} and planner.binding == "HTTP+JSON"
    assert settings.agent_for("acme") == "planner" and settings.agent_for("globex") == "research"
    assert settings.agent_for(None) == "research"
    assert "t0k3n" not in repr(settings) and "k3y" not in repr(settings)  # secrets never printed


def test_without_configuration_every_message_goes_to_the_agent_service(monkeypatch) -> None:
    settings = A2AAgentsSettings()
    assert settings.agents == [] and settings.agent_for("acme") is None
    # As docker compose passes them when .env leaves them out.
    for name, value in (("A2A_AGENTS", "[]"), ("A2A_DEFAULT_AGENT", ""), ("A2A_ORG_AGENTS", "{}")):
        monkeypatch.setenv(name, value)
    assert ConversationSettings().a2a == settings


@pytest.mark.parametrize(
    ("agents", "extra", "says"),
    [
        ([{"name": "Research", "card_url": CARD}], {}, "agent name 'Research'"),
        ([{"name": "r", "card_url": "ftp://x/card"}], {}, "card_url 'ftp://x/card' is not an http(s) URL"),
        ([{"name": "r", "card_url": CARD, "bearer_token": "a", "api_key": "b"}], {}, "not both"),
        ([{"name": "r", "card_url": CARD, "api_key": "a\nb"}], {}, "non-empty single line"),
        ([{"name": "r", "card_url": CARD, "api_key_header": "X Key", "api_key": "k"}], {}, "not an HTTP header name"),
        ([{"name": "r", "card_url": CARD, "token": "x"}], {}, "Extra inputs are not permitted"),
        ([{"name": "r", "card_url": CARD}, {"name": "r", "card_url": CARD}], {}, "repeated: r"),
        ([{"name": "r", "card_url": CARD}], {"default_agent": "s"}, "A2A_DEFAULT_AGENT 's' is not one of A2A_AGENTS (r)"),
        ([{"name": "r", "card_url": CARD}], {"org_agents": {"acme": "s"}}, "organisation 'acme' the agent 's'"),
    ],
)
def test_a_wrong_setting_stops_the_start_with_a_sentence(agents, extra, says) -> None:
    with pytest.raises(ValidationError) as caught:
        A2AAgentsSettings(agents=[A2AAgentConfig(**a) if "token" not in a else a for a in agents], **extra)
    assert says in str(caught.value)


def test_invalid_json_in_the_environment_is_refused(monkeypatch) -> None:
    monkeypatch.setenv("A2A_AGENTS", "[{name: research}]")
    with pytest.raises(Exception, match="a2a_agents|A2A_AGENTS|agents"):
        ConversationSettings()
