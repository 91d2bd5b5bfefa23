"""Remembering the user's name from the transcript and saying it back."""

from __future__ import annotations

import re
from collections.abc import Sequence

from shared.llm.base import LLMMessage
from shared.llm.builtin.skill import BuiltinReply, Skill, Turn, title

# Only the prefix is case-insensitive: a second name must be capitalised ("Ada Lovelace", not "Ada and").
_NAME_STATEMENT = re.compile(r"\b(?i:my name is|my name's|call me)\s+([A-Za-z][\w'-]*(?:\s+[A-Z][\w'-]*)?)")
_NAME_QUESTION = re.compile(r"\b(?:what(?:'s| is) my name|who am i|do you (?:know|remember) my name)\b", re.IGNORECASE)


def known_name(history: Sequence[LLMMessage]) -> str | None:
    name = None
    for m in history:
        if m.role in ("user", "system"):  # system: a summary of older history may carry it
            for match in _NAME_STATEMENT.finditer(m.content):
                name = match.group(1)
    return title(name) if name else None


def respond(turn: Turn) -> BuiltinReply | None:
    if _NAME_QUESTION.search(turn.text):
        name = known_name(turn.history)
        if name:
            return BuiltinReply(text=f"Your name is {name}.")
        return BuiltinReply(text="You haven't told me your name yet. What should I call you?")
    match = _NAME_STATEMENT.search(turn.text)
    if match:
        return BuiltinReply(text=f"Nice to meet you, {title(match.group(1))}! I'll remember your name.")
    return None


SKILL = Skill(respond)
