"""Summaries: an extractive summary of the conversation in a request marked ``purpose="summary"``."""

from __future__ import annotations

import re
from collections.abc import Sequence

from shared.llm.base import LLMMessage
from shared.llm.builtin.skill import BuiltinReply

MAX_SUMMARY_CHARS = 600

_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")
_KEY = re.compile(r"\d|\bmy name\b|\b(?:decid|agree|plan|need|want|must|will)\w*|\?")
_ROLE_PREFIX = re.compile(r"^(user|assistant|system)\s*:\s*", re.IGNORECASE)


def _sentences(messages: Sequence[LLMMessage]) -> list[str]:
    """Every sentence as "Speaker: sentence" (a transcript's "user:" lines keep their speaker)."""
    sentences: list[str] = []
    for m in messages:
        for line in m.content.splitlines():
            line = line.strip()
            speaker = m.role.capitalize()
            role_prefix = _ROLE_PREFIX.match(line)
            if role_prefix:
                speaker = role_prefix.group(1).capitalize()
                line = line[role_prefix.end() :]
            for sentence in _SENTENCE.findall(line):
                sentence = sentence.strip()
                if len(sentence) > 2:
                    sentences.append(f"{speaker}: {sentence}")
    return sentences


def summarize(messages: Sequence[LLMMessage]) -> BuiltinReply:
    """Extractive: keep the sentences with names, numbers, decisions and questions, in order.
    The system prompt is the instruction, not part of the conversation."""
    sentences = _sentences([m for m in messages if m.role != "system"])
    if not sentences:
        return BuiltinReply(text="There is no earlier conversation to summarize.")
    scored = [(bool(_KEY.search(s)) or bool(re.search(r"\b[A-Z][a-z]+\b", s.split(": ", 1)[1][1:])), i, s)
              for i, s in enumerate(sentences)]
    chosen = [i for keep, i, _ in scored if keep] or [0]
    picked: list[str] = []
    size = 0
    for i in chosen:
        sentence = sentences[i]
        if size + len(sentence) > MAX_SUMMARY_CHARS:
            break
        picked.append(sentence)
        size += len(sentence) + 1
    return BuiltinReply(text=" ".join(picked) or sentences[0][:MAX_SUMMARY_CHARS])
