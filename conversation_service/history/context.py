"""Conversation roles to agent roles.

The agent understands ``user``, ``assistant`` and ``system``. Conversation roles that
mean one of those under another name (``agent``, ``bot``, ``ai``, ``human``) are mapped; anything
else (tool traces, notices, unknown roles) returns ``None`` and is dropped from the history: sending
it as ``system`` would let stored text pose as instructions to the agent.
"""

from __future__ import annotations

from shared.protocol import Role

_ROLE_MAP: dict[str, Role] = {
    "user": Role.USER,
    "human": Role.USER,
    "assistant": Role.ASSISTANT,
    "agent": Role.ASSISTANT,
    "bot": Role.ASSISTANT,
    "ai": Role.ASSISTANT,
    "system": Role.SYSTEM,
}


def map_role(role: str) -> Role | None:
    """The agent role of a conversation role, or ``None`` when the message is not for the agent."""
    return _ROLE_MAP.get(role.strip().lower()) if isinstance(role, str) else None

