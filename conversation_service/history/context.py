"""Conversation roles to agent roles, and the user context the agent acts for.

Role mapping: the agent understands ``user``, ``assistant`` and ``system``. Conversation roles that
mean one of those under another name (``agent``, ``bot``, ``ai``, ``human``) are mapped; anything
else (tool traces, notices, unknown roles) returns ``None`` and is dropped from the history: sending
it as ``system`` would let stored text pose as instructions to the agent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from shared.protocol import MAX_ID_CHARS, Role, UserContext

_ROLE_MAP: dict[str, Role] = {
    "user": Role.USER,
    "human": Role.USER,
    "assistant": Role.ASSISTANT,
    "agent": Role.ASSISTANT,
    "bot": Role.ASSISTANT,
    "ai": Role.ASSISTANT,
    "system": Role.SYSTEM,
}

MAX_PERMISSIONS = 100


def map_role(role: str) -> Role | None:
    """The agent role of a conversation role, or ``None`` when the message is not for the agent."""
    return _ROLE_MAP.get(role.strip().lower()) if isinstance(role, str) else None


def _permissions_from_claims(claims: Mapping[str, Any]) -> list[str]:
    # Tokens carry permissions either as a list ("permissions") or OAuth-style ("scope": "a b c").
    raw: Iterable[Any] = ()
    if isinstance(claims.get("permissions"), (list, tuple)):
        raw = claims["permissions"]
    elif isinstance(claims.get("scope"), str):
        raw = claims["scope"].split()
    elif isinstance(claims.get("scopes"), (list, tuple)):
        raw = claims["scopes"]
    seen: dict[str, None] = {}
    for item in raw:
        # Malformed entries are ignored rather than trusted: a permission grants access downstream.
        if isinstance(item, str) and item and len(item) <= MAX_ID_CHARS and item.isprintable():
            seen.setdefault(item, None)
        if len(seen) >= MAX_PERMISSIONS:
            break
    return list(seen)


def user_context_from(
    *, owner_id: str, org_id: str | None = None, claims: Mapping[str, Any] | None = None
) -> UserContext:
    """The agent's ``user_context`` for a conversation.

    The user is the conversation's owner (the caller has already checked it is the token's
    subject); the organisation is the conversation's, else the token's ``org_id`` claim; the
    permissions come from the token only, never from anything the client sends with the message.
    """
    claims = claims or {}
    org = org_id
    if org is None and isinstance(claims.get("org_id"), str) and claims["org_id"]:
        org = claims["org_id"]
    return UserContext(user_id=owner_id, org_id=org, permissions=_permissions_from_claims(claims))
