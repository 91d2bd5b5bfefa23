"""Text from outside that PostgreSQL must store: its ``text`` and ``jsonb`` cannot hold a NUL
character (``\\x00``), and a write holding one fails whole. A NUL a model or a tool produced is
shown and stored as U+FFFD (the replacement character), in one place where the text comes in, so
that what clients see live and what a replay reads agree. A user's own message with a NUL is refused
at the edge instead (``conversation_service.messages.schemas``)."""

from __future__ import annotations

from typing import Any

NUL = "\x00"
REPLACEMENT = "\ufffd"
# How a NUL looks in JSON text: a cheap test of a whole document before walking it.
NUL_IN_JSON = "\\u0000"


def storable(value: Any) -> Any:
    """``value`` (a string, or JSON-like data: dicts, lists) with every NUL replaced, keys included."""
    if isinstance(value, str):
        return value.replace(NUL, REPLACEMENT) if NUL in value else value
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [storable(v) for v in value]
    return value
