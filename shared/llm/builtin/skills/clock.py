"""Telling the time with the ``current_time`` tool."""

from __future__ import annotations

import re

from shared.llm.builtin.skill import BuiltinReply, Skill, ToolResult, Turn

TOOL = "current_time"

_TIME = re.compile(r"\b(?:what(?:'s| is) the time|what time is it|current time|time is it|today's date|"
                   r"what(?:'s| is) the date|what day is it)\b", re.IGNORECASE)
_ZONE = re.compile(r"\b([A-Z][A-Za-z_]+(?:/[A-Z][A-Za-z_+-]+)+|UTC)\b")


def respond(turn: Turn) -> BuiltinReply | None:
    if not _TIME.search(turn.text):
        return None
    if not turn.offers(TOOL):
        return BuiltinReply(text="I can't read a clock from here: I'm the built-in offline model and no "
                                 "time tool is available in this chat.")
    zone = _ZONE.search(turn.text)
    arguments = {"timezone": zone.group(1)} if zone else {}
    where = f" in {zone.group(1)}" if zone else ""
    reasoning = f"The user wants the current time{where}. I will check the clock with the {TOOL} tool."
    return turn.call(TOOL, arguments, reasoning=reasoning)


def answer(result: ToolResult) -> str | None:
    if result.error is not None or not isinstance(result.value, dict):
        return None
    zone = result.value.get("timezone", "UTC")
    time_text = str(result.value.get("time", ""))[:5]
    date_text = result.value.get("date", "")
    weekday = result.value.get("weekday", "")
    return f"It is {time_text} ({zone}) on {weekday}, {date_text}.".replace(" , ", " ")


SKILL = Skill(respond, tool=TOOL, answer=answer)
