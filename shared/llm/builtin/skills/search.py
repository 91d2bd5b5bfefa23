"""Searching the project's documents with the ``knowledge_search`` tool."""

from __future__ import annotations

import re

from shared.llm.builtin.skill import BuiltinReply, Skill, ToolResult, Turn

TOOL = "knowledge_search"

_SEARCH_PATTERNS = [
    re.compile(r"\bwhat do(?:es)? (?:the )?(?:docs|documentation|documents)(?: say)? (?:say )?about\s+(.+)", re.IGNORECASE),
    re.compile(r"\b(?:search|look up|lookup|find)\s+(?:the\s+)?(?:docs|documentation|documents|knowledge base)"
               r"\s+(?:for|about|on)\s+(.+)", re.IGNORECASE),
    re.compile(r"\b(?:search|look up|lookup)\s+(?:for\s+)?(.+)", re.IGNORECASE),
    re.compile(r"^\s*(?:please\s+|can you\s+|could you\s+)?find\s+(?:me\s+)?(?:info(?:rmation)?\s+(?:on|about)\s+)?(.+)",
               re.IGNORECASE),
]


def _query(text: str) -> str | None:
    for pattern in _SEARCH_PATTERNS:
        match = pattern.search(text)
        if match:
            query = match.group(1).strip().strip("?.!\"'").strip()
            query = re.sub(r"^(?:for|about|on)\s+", "", query, flags=re.IGNORECASE)
            if query:
                return query[:200]
    return None


def respond(turn: Turn) -> BuiltinReply | None:
    query = _query(turn.text)
    if query is None:
        return None
    if not turn.offers(TOOL):
        return BuiltinReply(text=f'I can\'t search the documents for "{query}" in this chat: I\'m the built-in '
                                 "offline model and no search tool is available here.")
    reasoning = (f'The user is asking about "{query}". I will search the knowledge base and answer from what '
                 "it returns.")
    return turn.call(TOOL, {"query": query}, reasoning=reasoning)


def answer(result: ToolResult) -> str | None:
    hits = result.value.get("results") if isinstance(result.value, dict) else result.value
    if result.error is not None or not isinstance(hits, list):
        return None
    query = result.arguments.get("query", "that")
    if not hits:
        return f'I found nothing in the documents about "{query}".'
    lines = [f'Here is what the documents say about "{query}":']
    for hit in hits[:5]:
        if isinstance(hit, dict):
            snippet = " ".join(str(hit.get("snippet", "")).split())
            lines.append(f"- {hit.get('title', 'Untitled')} ({hit.get('path', '')}): {snippet}")
    return "\n".join(lines)


SKILL = Skill(respond, tool=TOOL, answer=answer)
