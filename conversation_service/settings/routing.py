"""Routing switches, every one from the environment (``AGENT_ROUTING_*``).

Lists are comma separated: ``AGENT_ROUTING_DISABLED_ORGS=acme,globex``. An ``*_ENABLED_*`` list,
when not empty, is an allow list: only those organisations (users) are routed to the agent, which
is how a rollout starts with a few pilots. The ``*_DISABLED_*`` lists win over the allow lists.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

DEFAULT_KEYWORDS = [
    "search",
    "look up",
    "analyze file",
    "analyse file",
    "analyze this file",
    "run code",
    "execute code",
    "calculate",
]
MAX_LIST_ITEMS = 10_000
MAX_KEYWORDS = 200
MAX_KEYWORD_CHARS = 64

CommaList = Annotated[list[str], NoDecode]


def _split(value: object, *, lower: bool) -> list[str]:
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)  # type: ignore[call-overload]
    out: dict[str, None] = {}
    for item in items:
        text = " ".join(str(item).split())
        if text:
            out.setdefault(text.lower() if lower else text, None)
    return list(out)


# Spec Risk 2: the words users see when the agent path is down and chat falls back.
FALLBACK_NOTICE = "Advanced features temporarily unavailable, using standard chat"
DISABLED_NOTICE = "Agent features are not enabled here, using standard chat"

class RoutingSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENT_ROUTING_", extra="ignore")

    # The rollback switch of the spec: false sends every message to the direct LLM.
    enabled: bool = True
    keywords: CommaList = Field(default_factory=lambda: list(DEFAULT_KEYWORDS))
    commands: CommaList = Field(default_factory=lambda: ["/agent", "@agent"])
    disabled_orgs: CommaList = Field(default_factory=list)
    enabled_orgs: CommaList = Field(default_factory=list)
    disabled_users: CommaList = Field(default_factory=list)
    enabled_users: CommaList = Field(default_factory=list)
    # Intent keywords are looked for in the first characters only: intent shows early, and a
    # 200 k-character paste must not cost more than the 1 ms a decision may take.
    scan_chars: int = Field(2000, ge=1, le=200_000)
    fallback_notice: str = Field(FALLBACK_NOTICE, min_length=1, max_length=500)
    disabled_notice: str = Field(DISABLED_NOTICE, min_length=1, max_length=500)

    @field_validator("keywords", "commands", mode="before")
    @classmethod
    def _lowercase_list(cls, value: object) -> list[str]:
        items = _split(value, lower=True)
        if len(items) > MAX_KEYWORDS:
            raise ValueError(f"at most {MAX_KEYWORDS} entries")
        if any(len(item) > MAX_KEYWORD_CHARS for item in items):
            raise ValueError(f"entries are at most {MAX_KEYWORD_CHARS} characters")
        return items

    @field_validator("commands")
    @classmethod
    def _commands_are_single_tokens(cls, value: list[str]) -> list[str]:
        if any(any(ch.isspace() for ch in item) for item in value):
            raise ValueError("a command is one word, such as /agent")
        return value

    @field_validator("disabled_orgs", "enabled_orgs", "disabled_users", "enabled_users", mode="before")
    @classmethod
    def _id_list(cls, value: object) -> list[str]:
        items = _split(value, lower=False)
        if len(items) > MAX_LIST_ITEMS:
            raise ValueError(f"at most {MAX_LIST_ITEMS} entries")
        return items
