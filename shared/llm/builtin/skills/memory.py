"""Facts about the user ("my favourite colour is green") and saying them back when asked.

The facts come from the conversation so far and from system messages: the Agent Service puts what
the user told it in earlier conversations there (its long-term memory), so a new conversation can
answer "what is my favourite colour?". "remember that ..." is acknowledged; names are the names
skill's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from shared.llm.base import LLMMessage
from shared.llm.builtin.skill import BuiltinReply, Skill, Turn

# "my favourite colour is green", "my dog's name is Rex": the subject is one to four words.
_FACT = re.compile(r"\bmy\s+((?:[\w'-]+\s+){0,3}?[\w'-]+)\s+(?:is|are)\s+([^.!?\n/]+)", re.IGNORECASE)
_QUESTION = re.compile(
    r"^(?:(?:do you (?:know|remember)|tell me|what(?:'s| is| are)|which is)\s+)+my\s+((?:[\w'-]+\s+){0,3}?[\w'-]+)\s*\??$",
    re.IGNORECASE,
)
_REMEMBER = re.compile(r"^(?:please\s+)?remember\s+(?:that\s+)?(.+?)[.!]?$", re.IGNORECASE)
_POSSESSIVES = [(re.compile(r"\bmy\b", re.IGNORECASE), "your"), (re.compile(r"\bI am\b|\bI'm\b", re.IGNORECASE), "you are"),
                (re.compile(r"\bI\b"), "you"), (re.compile(r"\bme\b", re.IGNORECASE), "you")]


def _second_person(text: str) -> str:
    for pattern, replacement in _POSSESSIVES:
        text = pattern.sub(replacement, text)
    return text


def _normal(subject: str) -> str:
    return " ".join(subject.lower().replace("favorite", "favourite").replace("color", "colour").split())


def known_fact(subject: str, history: Sequence[LLMMessage]) -> str | None:
    """The latest value the user gave for ``subject`` (the conversation's own statements win over memory)."""
    wanted = _normal(subject)
    found = None
    ordered = [m for m in history if m.role == "system"] + [m for m in history if m.role == "user"]
    for message in ordered:
        for line in message.content.splitlines():
            # Only what the user said: an assistant's words in a memory line are not the user's facts.
            said = line.split("Assistant:", 1)[0]
            for match in _FACT.finditer(said):
                if _normal(match.group(1)) == wanted:
                    found = match.group(2).strip().rstrip(",;")
    return found


def respond(turn: Turn) -> BuiltinReply | None:
    question = _QUESTION.match(turn.text.strip())
    if question and _normal(question.group(1)) != "name":
        subject = question.group(1)
        value = known_fact(subject, turn.history)
        if value is None:
            return BuiltinReply(text=f"I don't know your {subject} yet. Tell me, and I'll remember it.")
        return BuiltinReply(text=f"Your {subject} is {value}.")
    remember = _REMEMBER.match(turn.text.strip())
    if remember:
        return BuiltinReply(text=f"I'll remember that {_second_person(remember.group(1))}.")
    return None


SKILL = Skill(respond)
