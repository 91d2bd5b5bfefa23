"""What both HTTP bindings check before an operation, and how they frame a stream.

Every A2A request is authenticated as the rest of the Agent Service is (an ``X-API-Key`` or, with
``AGENT_SERVICE_AUTH_OIDC_ISSUER``, an access token of that provider as ``Authorization: Bearer``),
resolved to its ``Caller`` (``access``), which must hold the ``a2a`` permission and is handed to every
operation: it sees and acts on its own tasks only. A request must speak A2A 1.0: the
``A2A-Version`` header (or query parameter) says which version a client speaks; an empty one
means 0.3 (spec 3.6.2), which this server does not serve.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import Request
from pydantic import BaseModel, ValidationError

from agent_service.a2a.card import API_KEY_HEADER, PROTOCOL_VERSION
from agent_service.a2a.errors import (
    ContentTypeNotSupported,
    IdentityProviderDown,
    InvalidParams,
    PermissionDenied,
    Unauthenticated,
    VersionNotSupported,
)
from agent_service.a2a.service import A2AService
from agent_service.a2a.streams import TaskStreams
from agent_service.access.caller import Caller, Permission
from agent_service.errors import Forbidden, IdentityProviderUnavailable, Unauthorized
from agent_service.settings import AgentServiceSettings

VERSION_HEADER = "A2A-Version"


@dataclass(frozen=True, slots=True)
class A2AParts:
    """What the A2A routes need, built in the lifespan (``AgentState.a2a``)."""

    settings: AgentServiceSettings
    service: A2AService
    streams: TaskStreams


def parts(request: Request) -> A2AParts:
    return request.app.state.agent.a2a


async def authenticate(request: Request) -> Caller:
    """Before anything else: nothing about a request is answered to a stranger."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    bearer = token.strip() or None if scheme.lower() == "bearer" else None
    try:
        caller = await request.app.state.agent.callers.resolve(api_key=request.headers.get(API_KEY_HEADER), bearer=bearer)
        caller.require(Permission.A2A)
    except Unauthorized as exc:
        raise Unauthenticated(str(exc.detail)) from None
    except IdentityProviderUnavailable as exc:
        raise IdentityProviderDown(str(exc.detail)) from None
    except Forbidden as exc:
        raise PermissionDenied(str(exc.detail)) from None
    return caller


def check_version(request: Request) -> None:
    version = request.headers.get(VERSION_HEADER) or request.query_params.get(VERSION_HEADER) or ""
    if _major_minor(version.strip()) != PROTOCOL_VERSION:
        spoken = version.strip() or "0.3 (no A2A-Version)"
        raise VersionNotSupported(
            f"A2A version {spoken} is not supported; this agent speaks A2A {PROTOCOL_VERSION} "
            f"(send {VERSION_HEADER}: {PROTOCOL_VERSION})", supportedVersions=PROTOCOL_VERSION,
        )


def check_content_type(request: Request) -> None:
    """A body is JSON: ``application/json`` or ``application/a2a+json`` (spec 14.1)."""
    content_type = request.headers.get("Content-Type")
    if content_type is None:
        return
    media = content_type.split(";", 1)[0].strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        raise ContentTypeNotSupported(f"the body is JSON (application/json), not {media or 'empty'}")


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def last_event_id(request: Request) -> int | None:
    """The resume point of a subscription (the resume extension), from ``Last-Event-ID``."""
    raw = request.headers.get("Last-Event-ID", "").strip()
    if not raw:
        return None
    if not raw.isdigit() or len(raw) > 18:
        raise InvalidParams("Last-Event-ID is the seq of an event this server sent (a whole number)")
    return int(raw)


def validated(model: type[BaseModel], values: Any) -> Any:
    """``values`` as a request of ``model``, or InvalidParams saying which fields are wrong and why
    (without echoing what was sent: it may be a message body)."""
    if not isinstance(values, dict):
        raise InvalidParams("the parameters are a JSON object")
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(part) for part in error.get('loc', ())) or 'request'}: {error.get('msg', 'invalid')}"
            for error in exc.errors()[:5]
        ]
        raise InvalidParams("invalid parameters: " + "; ".join(problems)) from None


def sse_event(data: Any, seq: int | None) -> bytes:
    head = b"" if seq is None else b"id: %d\n" % seq
    return head + b"data: " + orjson.dumps(data) + b"\n\n"
