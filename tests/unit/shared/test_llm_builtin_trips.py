"""The built-in model's trip planner: asking where and how long, and reading the answer as a person means it."""

from __future__ import annotations

import pytest

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


@pytest.mark.parametrize(
    ("answer", "plan"),
    [
        ("Lisbon in May", "Here is a 3-day plan for Lisbon:"),
        ("to Porto for 5 days", "Here is a 5-day plan for Porto:"),
        ("I'd like to go to New York for a week", "Here is a 7-day plan for New York:"),
        ("Kyoto", "Here is a 3-day plan for Kyoto:"),
        ("lisbon in may, 4 days", "Here is a 4-day plan for Lisbon:"),
        ("Rome next week", "Here is a 3-day plan for Rome:"),
        ("Two weeks in Japan in the summer", "Here is a 14-day plan for Japan:"),
        ("Paris on Friday for a couple of days", "Here is a 2-day plan for Paris:"),
        ("in 2 weeks, Berlin for 4 days", "Here is a 4-day plan for Berlin:"),
        ("Lisbon, May 3rd to May 10th", "Here is a 3-day plan for Lisbon:"),
        ("we would love to see Rome in December, 3 nights", "Here is a 3-day plan for Rome:"),
    ],
)
def test_the_answer_names_the_place_the_way_a_person_means_it(answer: str, plan: str) -> None:
    ask = ToolCall(id="a1", name="ask_user", arguments={"question": TRIP_QUESTION})
    by_tool = decide([user("plan a trip"), assistant("", ask), tool_result(ask, {"answer": answer})], ALL_TOOLS)
    assert by_tool.text.startswith(plan + "\n")
    in_text = decide([user("plan a trip"), assistant(TRIP_QUESTION), user(answer)], [])
    assert in_text.text == by_tool.text


@pytest.mark.parametrize("answer", ["May", "next week", "in June, for 4 days", "on Friday", "5 days"])
def test_a_date_or_a_duration_is_not_a_place(answer: str) -> None:
    ask = ToolCall(id="a1", name="ask_user", arguments={"question": TRIP_QUESTION})
    reply = decide([user("plan a trip"), assistant("", ask), tool_result(ask, {"answer": answer})], ALL_TOOLS)
    assert reply.text == "I still don't know where you'd like to go. Tell me a destination and I'll plan the trip."


@pytest.mark.parametrize(
    ("request_text", "plan"),
    [
        ("plan a trip to Lisbon in May", "Here is a 3-day plan for Lisbon:"),
        ("plan a trip in May to Lisbon", "Here is a 3-day plan for Lisbon:"),
        ("Plan a 5-day trip to Porto next Friday", "Here is a 5-day plan for Porto:"),
        ("plan a trip to Kyoto for two weeks", "Here is a 14-day plan for Kyoto:"),
    ],
)
def test_a_request_that_names_the_place_is_planned_directly(request_text: str, plan: str) -> None:
    reply = decide([user(request_text)], ALL_TOOLS)
    assert reply.tool_calls == ()
    assert reply.text.startswith(plan + "\n")


@pytest.mark.parametrize("request_text", ["plan a trip in June", "plan a trip for next week", "book a holiday on Monday"])
def test_a_request_with_only_a_date_still_asks_where(request_text: str) -> None:
    call = only_call(decide([user(request_text)], ALL_TOOLS))
    assert call.name == "ask_user" and call.arguments == {"question": TRIP_QUESTION}
