"""The Agent Card (``/.well-known/agent-card.json``): who the agent is and how to reach it.

Its skills are the profiles; its interfaces the two bindings this service serves; its security
what the A2A routes check (the Agent Service's API key or an access token of its identity provider,
unless the conformance-test setting turned it off). The resume extension says how a subscriber picks up a stream where it was cut.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from agent_service.a2a.inbound import INPUT_MODES, OUTPUT_MODES
from agent_service.profiles.service import ProfileStore
from agent_service.settings import AgentServiceSettings

PROTOCOL_VERSION = "1.0"
JSONRPC_PATH = "/a2a/jsonrpc"
REST_PATH = "/a2a/v1"
RESUME_EXTENSION = "urn:taskforce:a2a:event-seq-resume:v1"
API_KEY_SCHEME = "apiKey"
API_KEY_HEADER = "X-API-Key"
OIDC_SCHEME = "oidc"
CARD_MAX_AGE_S = 300

_RESUME_DESCRIPTION = (
    "Every stream response carries metadata.seq (the task's event sequence number, increasing, "
    "never reused) and is sent as an SSE event with id: <seq>. A SubscribeToTask with the header "
    "Last-Event-ID: <seq> gets no Task snapshot but every event of the task after that seq, once "
    "and in order, then the live ones until a terminal state, also when the task has ended since "
    "and after the agent restarted. Seqs may jump (a crash leaves a hole), never repeat."
)


def build_card(settings: AgentServiceSettings, profiles: ProfileStore, base_url: str) -> dict[str, Any]:
    base = (settings.a2a_public_url or base_url).rstrip("/")
    card: dict[str, Any] = {
        "name": "TaskForce Agent",
        "description": (
            "A tool-using ReAct agent: it reasons, calls tools (calculator, document search, clock), "
            "asks when a detail is missing, writes files and hands over links and data (artifacts), "
            "and streams its work."
        ),
        "version": "1.0",
        "supportedInterfaces": [
            {"url": f"{base}{JSONRPC_PATH}", "protocolBinding": "JSONRPC", "protocolVersion": PROTOCOL_VERSION},
            {"url": f"{base}{REST_PATH}", "protocolBinding": "HTTP+JSON", "protocolVersion": PROTOCOL_VERSION},
        ],
        "capabilities": {
            "streaming": True,
            "pushNotifications": False,
            "extendedAgentCard": False,
            "extensions": [{"uri": RESUME_EXTENSION, "description": _RESUME_DESCRIPTION, "required": False}],
        },
        "defaultInputModes": list(dict.fromkeys([*INPUT_MODES, *settings.a2a_file_types])),
        "defaultOutputModes": list(OUTPUT_MODES),
        "skills": [
            {"id": profile.name, "name": profile.name, "description": profile.description or profile.name,
             "tags": list(profile.tools) or [profile.name]}
            for profile in profiles.all()
        ],
    }
    card.update(_security(settings))
    return card


def _security(settings: AgentServiceSettings) -> dict[str, Any]:
    """What the A2A routes accept (transport.authenticate): a key, or a token of the identity provider."""
    schemes: dict[str, Any] = {}
    if settings.api_keys or settings.callers:
        schemes[API_KEY_SCHEME] = {"apiKeySecurityScheme": {
            "location": "header", "name": API_KEY_HEADER,
            "description": "an API key the operator gave this client (AGENT_SERVICE_CALLERS)",
        }}
    oidc = settings.auth_oidc
    if oidc.issuer:
        schemes[OIDC_SCHEME] = {"openIdConnectSecurityScheme": {
            "openIdConnectUrl": f"{oidc.issuer.rstrip('/')}/.well-known/openid-configuration",
            "description": f"an access token of this provider for the audience {oidc.audience} "
                           "(client credentials), as Authorization: Bearer",
        }}
    # Each requirement is one way in; any of them will do.
    return {"securitySchemes": schemes, "securityRequirements": [{"schemes": {name: {"list": []}}} for name in schemes]}


def card_etag(card: dict[str, Any]) -> str:
    return '"' + hashlib.sha256(orjson.dumps(card, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32] + '"'
