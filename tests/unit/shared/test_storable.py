"""``storable``: a NUL (which PostgreSQL's text and jsonb refuse) becomes U+FFFD, wherever it is."""

from __future__ import annotations

from shared.storable import storable


def test_every_nul_is_replaced_in_strings_keys_and_nested_data() -> None:
    assert storable("a\x00b\x00") == "a\ufffdb\ufffd"
    assert storable({"k\x00": ["x\x00", {"y": "\x00"}, 3, None], "n": 1.5}) == {
        "k\ufffd": ["x\ufffd", {"y": "\ufffd"}, 3, None], "n": 1.5,
    }


def test_text_without_a_nul_is_returned_as_it_is() -> None:
    text = "plain text"
    assert storable(text) is text
    assert storable({"a": [1, "b"]}) == {"a": [1, "b"]}
