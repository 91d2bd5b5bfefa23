"""A conversation's title made of its first message."""

from __future__ import annotations

import pytest

from conversation_service.conversations.service import TITLE_CHARS, title_from_message


@pytest.mark.parametrize(
    ("message", "title"),
    [
        ("hello", "hello"),
        ("  what is\n\n17*23?\t", "what is 17*23?"),
        ("/agent plan a trip", "plan a trip"),
        ("/agent", "/agent"),  # nothing but the command: the command is all there is to name it by
        ("@agent plan a trip", "@agent plan a trip"),  # only a slash command is left out
        ("see /agent docs", "see /agent docs"),
        ("", ""),
    ],
)
def test_short_messages(message: str, title: str) -> None:
    assert title_from_message(message) == title


def test_a_long_message_is_cut_at_a_word() -> None:
    words = " ".join(f"word{i}" for i in range(40))
    title = title_from_message(words)
    assert len(title) <= TITLE_CHARS
    assert title.endswith("…")
    assert words.startswith(title[:-1]) and words[len(title) - 1] == " "


def test_a_long_word_is_cut_where_the_title_ends() -> None:
    title = title_from_message("x" * 500)
    assert title == "x" * (TITLE_CHARS - 1) + "…"
