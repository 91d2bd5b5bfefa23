"""Greetings, thanks, what the model is, and the short reply to anything it cannot do."""

from __future__ import annotations

import re

from shared.llm.builtin.skill import BuiltinReply, Skill, Turn
from shared.llm.builtin.skills.names import known_name

_CAPABILITIES = (
    "I can do arithmetic, search the project's documents, tell the time, plan a trip and remember what you "
    "tell me in this conversation."
)
SELF_DESCRIPTION = f"I'm the built-in offline model: {_CAPABILITIES}"

_GREETING = re.compile(r"^\s*(?:hi|hello|hey|good (?:morning|afternoon|evening)|howdy)\b", re.IGNORECASE)
_IDENTITY = re.compile(r"\b(?:who are you|what are you|what can you do|help)\b", re.IGNORECASE)
_THANKS = re.compile(r"^\s*(?:thanks|thank you|cheers)\b", re.IGNORECASE)


def opening() -> BuiltinReply:
    """The reply to a transcript without a user message."""
    return BuiltinReply(text=f"Hello! {SELF_DESCRIPTION} What can I do for you?")


def respond(turn: Turn) -> BuiltinReply | None:
    if _THANKS.search(turn.text):
        return BuiltinReply(text="You're welcome! Anything else I can help with?")
    if _GREETING.search(turn.text):
        name = known_name(turn.history)
        return BuiltinReply(text=f"Hello{', ' + name if name else ''}! {SELF_DESCRIPTION}")
    if _IDENTITY.search(turn.text):
        return BuiltinReply(text=SELF_DESCRIPTION)
    return None


def fallback(turn: Turn) -> BuiltinReply:
    """The reply when no skill took the message."""
    words = turn.text.split()
    topic = " ".join(words[:12]).rstrip("?.!") + ("…" if len(words) > 12 else "")
    text = f'You asked: "{topic}". I\'m the built-in offline model, so I can\'t answer that properly. '
    return BuiltinReply(text=text + _CAPABILITIES)


SKILL = Skill(respond)
