"""Which A2A agents the chat may delegate to, read from the environment and checked at start.

``A2A_AGENTS`` is a JSON list, one object per agent::

    [{"name": "research", "card_url": "https://research.example.com/.well-known/agent-card.json",
      "bearer_token": "..."},
     {"name": "planner", "card_url": "http://planner:8080/.well-known/agent-card.json",
      "api_key": "...", "api_key_header": "X-API-Key"}]

``name`` is what users type after ``/agent`` and what the page shows; a credential is a bearer token
or an API key in a header (never both; none for an agent open on a private network). Which agent
answers a message nobody named: the organisation's (``A2A_ORG_AGENTS``, JSON ``{"acme": "research"}``),
else the deployment's (``A2A_DEFAULT_AGENT``), else the Agent Service. A setting that does not hold
stops the start-up with a sentence saying which agent and what is wrong.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
_HEADER_RE = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")
Binding = Literal["JSONRPC", "HTTP+JSON"]


class A2AAgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    card_url: str
    bearer_token: SecretStr | None = None
    api_key: SecretStr | None = None
    api_key_header: str = "X-API-Key"
    # Which of the card's bindings to use when it offers both (JSON-RPC first otherwise).
    binding: Binding | None = None
    # Send the chat user's ids as the message's metadata (userId, orgId): for agents that act per user,
    # such as the TaskForce Agent Service (its memory and rate limits are per user).
    forward_user: bool = False

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME_RE.match(value):
            raise ValueError(f"agent name {value!r}: 1-32 characters, lowercase letters, digits, - and _, "
                             "starting with a letter or digit (users type it after /agent)")
        return value

    @field_validator("card_url")
    @classmethod
    def _card_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.fragment:
            raise ValueError(f"card_url {value!r} is not an http(s) URL (the agent card, e.g. "
                             "https://host/.well-known/agent-card.json)")
        return value

    @field_validator("api_key_header")
    @classmethod
    def _header(cls, value: str) -> str:
        if not _HEADER_RE.match(value):
            raise ValueError(f"api_key_header {value!r} is not an HTTP header name")
        return value

    @model_validator(mode="after")
    def _one_credential(self) -> A2AAgentConfig:
        if self.bearer_token is not None and self.api_key is not None:
            raise ValueError(f"agent {self.name!r}: give bearer_token or api_key, not both")
        for secret in (self.bearer_token, self.api_key):
            if secret is not None and (not secret.get_secret_value() or any(
                    c in secret.get_secret_value() for c in "\r\n\0")):
                raise ValueError(f"agent {self.name!r}: a credential is a non-empty single line")
        return self

    def auth_headers(self) -> dict[str, str]:
        """The credential as request headers (never logged)."""
        if self.bearer_token is not None:
            return {"Authorization": f"Bearer {self.bearer_token.get_secret_value()}"}
        if self.api_key is not None:
            return {self.api_key_header: self.api_key.get_secret_value()}
        return {}


class A2AAgentsSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="A2A_", extra="ignore", case_sensitive=False)

    agents: list[A2AAgentConfig] = Field(default_factory=list)
    default_agent: str | None = None
    org_agents: dict[str, str] = Field(default_factory=dict)
    # How long a fetched agent card is used before it is fetched again (at most; the card's own
    # Cache-Control max-age shortens it).
    card_cache_s: Annotated[float, Field(ge=0, le=86_400)] = 300.0

    @field_validator("default_agent", mode="before")
    @classmethod
    def _unset(cls, value: object) -> object:
        return None if value == "" else value  # A2A_DEFAULT_AGENT= (docker compose passes it empty)

    @model_validator(mode="after")
    def _names_known(self) -> A2AAgentsSettings:
        names = [agent.name for agent in self.agents]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"A2A_AGENTS names each agent once; repeated: {', '.join(twice)}")
        if self.default_agent is not None and self.default_agent not in names:
            raise ValueError(f"A2A_DEFAULT_AGENT {self.default_agent!r} is not one of A2A_AGENTS "
                             f"({', '.join(names) or 'none configured'})")
        for org, name in self.org_agents.items():
            if name not in names:
                raise ValueError(f"A2A_ORG_AGENTS gives organisation {org!r} the agent {name!r}, which is not "
                                 f"one of A2A_AGENTS ({', '.join(names) or 'none configured'})")
        return self

    @property
    def names(self) -> frozenset[str]:
        return frozenset(agent.name for agent in self.agents)

    def agent_for(self, org_id: str | None) -> str | None:
        """The A2A agent that answers an organisation's messages when none is named; None: the Agent Service."""
        if org_id is not None and org_id in self.org_agents:
            return self.org_agents[org_id]
        return self.default_agent
