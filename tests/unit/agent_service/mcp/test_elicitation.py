"""A server's question as the user reads it, and the user's answer as the server takes it."""

from __future__ import annotations

import mcp_types as types
import pytest

from agent_service.mcp.elicitation import AnswerDoesNotFit, answer, question
from agent_service.tools.base import UserReply

FORM = types.ElicitRequestFormParams(message="How should the table be booked?", requested_schema={
    "type": "object", "required": ["seats", "window"],
    "properties": {
        "seats": {"type": "integer", "minimum": 1, "maximum": 8, "description": "how many"},
        "window": {"type": "boolean"},
        "meal": {"type": "string", "enum": ["vegetarian", "fish"], "default": "fish"},
        "hero": {"type": "string", "oneOf": [{"const": "h1", "title": "Superman"}, {"const": "h2", "title": "Batman"}]},
        "email": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}},
    },
})
ONE = types.ElicitRequestFormParams(message="Which environment?", requested_schema={
    "type": "object", "required": ["environment"], "properties": {"environment": {"type": "string"}}})


def test_the_question_names_who_asks_and_how_to_answer() -> None:
    text = question("ops", "book", FORM)
    assert text.startswith("book (MCP server ops) asks: How should the table be booked?")
    assert "- seats (a whole number, required): how many" in text
    assert "- meal (one of fish, vegetarian) [default: fish]" in text
    assert "- hero (one of Batman, Superman)" in text and "- tags (any of a, b, c, comma-separated)" in text
    assert 'Answer "decline" to refuse.' in text
    assert "Answer with the environment (text, required)." in question("ops", "deploy", ONE)
    url = types.ElicitRequestURLParams(message="Sign in", url="https://id.example/authorize", elicitation_id="e1")
    assert "Open https://id.example/authorize" in question("ops", "connect", url)
    assert question("ops", "book", FORM, "seats is a whole number").startswith("That answer did not fit: seats")


def test_answers_fill_the_form_with_types_choices_and_defaults() -> None:
    lines = answer(FORM, UserReply("seats: 2\nwindow: yes\nhero: batman\ntags: a, c\nemail: ada@example.com"))
    assert lines.action == "accept" and lines.content == {
        "seats": 2, "window": True, "meal": "fish", "hero": "h2", "email": "ada@example.com", "tags": ["a", "c"]}
    as_json = answer(FORM, UserReply('{"seats": 3, "window": false, "meal": "Vegetarian"}'))
    assert as_json.content == {"seats": 3, "window": False, "meal": "vegetarian"}
    assert answer(ONE, UserReply("  staging ")).content == {"environment": "staging"}


@pytest.mark.parametrize(("text", "problem"), [
    ("seats: 2", "window is required"),
    ("seats: 20\nwindow: yes", "seats is between 1 and 8"),
    ("seats: two\nwindow: yes", "seats is a whole number"),
    ("seats: 2\nwindow: perhaps", "window is yes or no"),
    ("seats: 2\nwindow: yes\nmeal: pasta", "meal is one of fish, vegetarian"),
    ("seats: 2\nwindow: yes\ncolour: red", "there is no field 'colour'"),
    ("two seats by the window", "name: value"),
    ("seats: 2\nwindow: yes\nemail: nobody", "email is an email address"),
])
def test_an_answer_that_does_not_fit_says_why(text: str, problem: str) -> None:
    with pytest.raises(AnswerDoesNotFit, match=problem):
        answer(FORM, UserReply(text))


def test_decline_and_url_answers() -> None:
    assert answer(FORM, UserReply("Decline")).action == "decline"
    assert answer(FORM, UserReply("", declined=True)).action == "decline"
    url = types.ElicitRequestURLParams(message="Sign in", url="https://id.example/a", elicitation_id="e1")
    assert answer(url, UserReply("done")).action == "accept"
