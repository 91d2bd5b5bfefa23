"""The model's behaviour as a pure function of the transcript, the offered tools and the purpose.

* ``purpose="summary"`` -> an extractive summary of the conversation given;
* tool results after the last user message -> the answer, read by the skill that owns the tool;
* otherwise the skills below, in order: the first that takes the user's last message answers it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import orjson

from shared.llm.base import LLMMessage
from shared.llm.builtin.skill import BuiltinReply, ToolResult, Turn
from shared.llm.builtin.skills import (
    arithmetic,
    clock,
    files,
    memory,
    names,
    search,
    small_talk,
    summary,
    trips,
)

# Decision order. Facts about the user (names, then the rest) first; a request to save the previous
# answer before the skills its words could match (a trip, a sum); a pending trip question comes
# before arithmetic (the trip skill itself lets a sum through), and search and small talk come
# last: their patterns are the loosest.
SKILLS = (names.SKILL, memory.SKILL, files.SKILL, clock.SKILL, trips.SKILL, arithmetic.SKILL, search.SKILL,
          small_talk.SKILL)
_BY_TOOL = {skill.tool: skill for skill in SKILLS if skill.tool is not None}


def decide(
    messages: Sequence[LLMMessage], tool_names: Sequence[str] = (), *, purpose: str = "chat"
) -> BuiltinReply:
    """Identical input gives identical output, tool-call ids included."""
    if purpose == "summary":
        return summary.summarize(messages)
    last_user = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), -1)
    after = messages[last_user + 1 :]
    results = [m for m in after if m.role == "tool"]
    if results:
        request = messages[last_user].content if last_user >= 0 else ""
        return BuiltinReply(text=_answer_from_tools(after, results, request))
    if last_user < 0:
        return small_talk.opening()
    turn = Turn(text=messages[last_user].content.strip(), history=messages[:last_user],
                tools=frozenset(tool_names), seed=_seed(messages))
    for skill in SKILLS:
        reply = skill.respond(turn)
        if reply is not None:
            return reply
    return small_talk.fallback(turn)


def _seed(messages: Sequence[LLMMessage]) -> str:
    digest = hashlib.sha256()
    for m in messages:
        digest.update(orjson.dumps(m.to_dict(), option=orjson.OPT_SORT_KEYS))
    return digest.hexdigest()


def _answer_from_tools(after: Sequence[LLMMessage], results: list[LLMMessage], request: str) -> str:
    calls = {c.id: c for m in after if m.role == "assistant" for c in m.tool_calls}
    parts = []
    for message in results:
        call = calls.get(message.tool_call_id or "")
        name = call.name if call else (message.name or "tool")
        value = _parse(message.content)
        result = ToolResult(arguments=call.arguments if call else {}, value=value, error=_error(value),
                            request=request)
        skill = _BY_TOOL.get(name)
        text = skill.answer(result) if skill is not None and skill.answer is not None else None
        if text is None and result.error is not None:
            text = f"I couldn't complete that with the {name} tool: {result.error}"
        if text is None:
            # A result no skill can read (e.g. cut short by the engine): quote it.
            shown = value if isinstance(value, str) else orjson.dumps(value).decode()
            text = f"The {name} tool returned: {shown[:500]}"
        parts.append(text)
    return "\n\n".join(parts)


def _parse(content: str) -> Any:
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return content


def _error(result: Any) -> str | None:
    if isinstance(result, dict) and result.get("error"):
        return str(result["error"])
    if isinstance(result, dict) and result.get("ok") is False:
        return str(result.get("message") or result.get("detail") or "the tool failed")
    if isinstance(result, str) and result.lower().startswith(("error", "toolerror")):
        return result.split(":", 1)[-1].strip() or result
    return None
