"""The environment variables the services read: every field of their ``Settings`` trees under the name
pydantic-settings reads it by (the class's ``env_prefix`` and the field's name, or its aliases, which take
no prefix), nested settings classes included, and the few variables read outside them."""

from __future__ import annotations

from pydantic import AliasChoices
from pydantic_settings import BaseSettings

from agent_service.settings import AgentServiceSettings
from conversation_service.settings import ConversationSettings

# Read outside the Settings classes: the worker count of `python -m <service>` (its --workers default), and
# OpenTelemetry's own variables, read by the SDK (shared/tracing/config.py names the ones it reads itself).
OUTSIDE_SETTINGS = frozenset({"WORKERS", "PROMETHEUS_MULTIPROC_DIR"})
OTEL_PREFIX = "OTEL_"


def env_names(settings: type[BaseSettings]) -> set[str]:
    prefix = settings.model_config.get("env_prefix", "")
    names: set[str] = set()
    for name, field in settings.model_fields.items():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseSettings):
            names |= env_names(kind)
            continue
        alias = field.validation_alias or field.alias
        if isinstance(alias, AliasChoices):
            names |= {choice.upper() for choice in alias.choices if isinstance(choice, str)}
        elif isinstance(alias, str):
            names.add(alias.upper())
        else:
            names.add(f"{prefix}{name}".upper())
    return names


AGENT_SERVICE_ENV = frozenset(env_names(AgentServiceSettings))
CONVERSATION_SERVICE_ENV = frozenset(env_names(ConversationSettings))


def is_setting(service: str, variable: str) -> bool:
    """Whether ``service`` (``agent_service`` or ``conversation_service``) reads ``variable``."""
    own = AGENT_SERVICE_ENV if service == "agent_service" else CONVERSATION_SERVICE_ENV
    return variable in own or variable in OUTSIDE_SETTINGS or variable.startswith(OTEL_PREFIX)
