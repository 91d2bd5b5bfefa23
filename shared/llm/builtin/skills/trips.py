"""Planning a trip: a day-by-day plan for a destination, asking where and how long when not told.

A destination is read the way a person means it: dates and durations are taken out of the message
first ("Lisbon in May", "to Porto for 5 days", "next week"), so a month, a weekday or a number of
days is never taken for a place. The question goes out with the ``ask_user`` tool when it is
offered, otherwise in text, and the next message is read as the answer.
"""

from __future__ import annotations

import re

from shared.llm.builtin.skill import BuiltinReply, Skill, ToolResult, Turn, title
from shared.llm.builtin.skills.arithmetic import expression_in

TOOL = "ask_user"
TRIP_QUESTION = "Where would you like to go, and for how many days?"
MAX_TRIP_DAYS = 14
DEFAULT_TRIP_DAYS = 3

_TRIP = re.compile(r"\b(?:plan|organi[sz]e|book)\b.*\b(?:trip|vacation|holiday|journey|getaway|itinerary)\b"
                   r"|\bitinerary\b", re.IGNORECASE)
_NUMBER_WORDS = {"one": 1, "a": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                 "eight": 8, "nine": 9, "ten": 10, "a couple of": 2, "a few": 3}
_COUNT = r"\d{1,3}|" + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True))
_DURATION = re.compile(rf"(?:\bfor\s+)?\b({_COUNT})[\s-]*(day|night|week)s?\b", re.IGNORECASE)
_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
_WEEKDAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
# When the trip is, with the preposition that belongs to it ("in May", "on Friday", "next week",
# "in 2 weeks"): taken out before looking for the place.
_DATE = re.compile(
    r"(?:\b(?:in|on|during|over|for|from|until|till|by|around)\s+)?"
    r"(?:\b(?:early|late|mid|this|next|coming|the)[\s-]+)*"
    rf"\b(?:{_MONTHS}|(?:{_WEEKDAYS})s?|spring|summer|autumn|fall|winter|today|tomorrow|tonight|christmas"
    r"|easter)\b"
    r"|\b(?:this|next|coming|the)\s+(?:week(?:end)?|month|year)\b"
    rf"|\bin\s+(?:{_COUNT})\s+(?:day|week|month)s?\b",
    re.IGNORECASE,
)
_PLACE_AFTER = re.compile(r"\b(?i:to|in|visit(?:ing)?|around)\s+([A-Z][\w'-]+(?:\s+[A-Z][\w'-]+)*)")
_FILLER = {"i", "i'd", "id", "we", "we'd", "would", "like", "want", "to", "go", "going", "visit", "the", "a", "an",
           "for", "in", "and", "please", "let's", "lets", "maybe", "about", "trip", "travel", "days", "day",
           "of", "there", "me", "us", "stay", "spend", "with", "on", "weekend", "sure", "ok", "okay", "yes",
           "think", "how"}


def _read(text: str, *, loose: bool) -> tuple[str | None, int]:
    """The destination and the number of days in a request ("to Lisbon in May for 5 days");
    ``loose`` also takes a bare answer ("lisbon, 3 days")."""
    undated = _DATE.sub(" ", text)
    days = DEFAULT_TRIP_DAYS
    if duration := _DURATION.search(undated):
        count, unit = duration.group(1).lower(), duration.group(2).lower()
        days = (int(count) if count.isdigit() else _NUMBER_WORDS[count]) * (7 if unit == "week" else 1)
        days = max(1, min(days, MAX_TRIP_DAYS))
    placed = _DURATION.sub(" ", undated)
    match = _PLACE_AFTER.search(placed)
    if match or not loose:
        return (match.group(1) if match else None), days
    words = [w for w in re.findall(r"\b[A-Za-zÀ-ÿ][\w'-]*", placed) if w.lower() not in _FILLER]
    # A capitalised word is a name ("we'd love to see Rome"); an answer typed in lower case is all place.
    words = [w for w in words if w[0].isupper()] or words
    return (title(" ".join(words[:3])) if words else None), days


def _plan(destination: str, days: int) -> str:
    activities = [
        "arrive, settle in and walk through the historic centre, then dinner at a local restaurant",
        "visit the main museums and landmarks in the morning, explore the food market in the afternoon",
        "take a day trip to the surroundings and end the day at a viewpoint at sunset",
        "join a guided walking tour of the old neighbourhoods and try the local specialities",
        "relax in a park or on the waterfront, then shop for souvenirs",
        "explore a neighbourhood off the usual tourist path and see a live performance",
        "revisit your favourite spots and pack for the trip home",
    ]
    lines = [f"Here is a {days}-day plan for {destination}:"]
    for day in range(days):
        activity = activities[-1] if day == days - 1 and days > 1 else activities[day % (len(activities) - 1)]
        lines.append(f"Day {day + 1}: {activity}.")
    lines.append("Enjoy your trip!")
    return "\n".join(lines)


def _plan_from_answer(answer: str) -> str:
    destination, days = _read(answer, loose=True)
    if not destination:
        return "I still don't know where you'd like to go. Tell me a destination and I'll plan the trip."
    return _plan(destination, days)


def respond(turn: Turn) -> BuiltinReply | None:
    previous = turn.previous_answer()
    if (previous is not None and previous.content.strip() == TRIP_QUESTION
            and expression_in(turn.text, turn.history) is None):
        # The question was asked in text (no ask_user tool): this message is the answer, unless it is
        # plainly a new request (a user who moved on to arithmetic is not naming a destination).
        return BuiltinReply(text=_plan_from_answer(turn.text))
    if not _TRIP.search(turn.text):
        return None
    destination, days = _read(turn.text, loose=False)
    if destination:
        return BuiltinReply(text=_plan(destination, days))
    if not turn.offers(TOOL):
        return BuiltinReply(text=TRIP_QUESTION)
    reasoning = ("The user wants a trip plan but has not said where or for how long. I need to ask before I "
                 "can plan.")
    return turn.call(TOOL, {"question": TRIP_QUESTION}, reasoning=reasoning)


def answer(result: ToolResult) -> str | None:
    """The result of ``ask_user`` is the user's answer to the question."""
    if result.error is not None:
        return f"I didn't get an answer to my question, so I can't go on with that ({result.error})."
    reply = result.value
    if isinstance(reply, dict):
        reply = reply.get("answer") or reply.get("text")
    reply = str(reply or "")
    if str(result.arguments.get("question", "")) == TRIP_QUESTION or _TRIP.search(result.request):
        return _plan_from_answer(reply)
    return f"Thanks, noted: {reply}"


SKILL = Skill(respond, tool=TOOL, answer=answer)
