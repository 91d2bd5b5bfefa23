"""The built-in model's trip planner: asking where and how long, and planning from the answer."""

from __future__ import annotations

from shared.llm.base import ToolCall
from shared.llm.builtin import decide
from shared.llm.builtin.skills.trips import TRIP_QUESTION
from tests.unit.shared.builtin_transcripts import ALL_TOOLS, assistant, only_call, tool_result, user


def test_trip_without_destination_asks_the_user() -> None:
    reply = decide([user("Can you plan a trip for me?")], ALL_TOOLS)
    call = only_call(reply)
    assert call.name == "ask_user"
    assert call.arguments == {"question": "Where would you like to go, and for how many days?"}
    assert reply.reasoning


def test_trip_plan_uses_the_answer_to_the_question() -> None:
    call = ToolCall(id="a1", name="ask_user", arguments={"question": TRIP_QUESTION})
    transcript = [user("plan a trip"), assistant("", call), tool_result(call, "Lisbon for 3 days")]
    reply = decide(transcript, ALL_TOOLS)
    assert reply.text.startswith("Here is a 3-day plan for Lisbon:")
    assert "Day 3:" in reply.text and "Day 4:" not in reply.text


def test_trip_with_destination_asks_nothing() -> None:
    reply = decide([user("plan a trip to Lisbon")], ALL_TOOLS)
    assert reply.tool_calls == ()
    assert reply.text.startswith("Here is a 3-day plan for Lisbon:")
    reply = decide([user("Plan a trip to New York for 5 days")], ALL_TOOLS)
    assert reply.text.startswith("Here is a 5-day plan for New York:")


def test_trip_question_in_text_when_ask_user_is_not_offered() -> None:
    first = decide([user("plan a trip")], ["calculator"])
    assert first.text == TRIP_QUESTION and first.tool_calls == ()
    second = decide([user("plan a trip"), assistant(first.text), user("lisbon, 4 days")], [])
    assert second.text.startswith("Here is a 4-day plan for Lisbon:")

