"""The model stream's data decoder: any slicing of the bytes, every line ending, the WHATWG rules."""

from __future__ import annotations

import pytest

from shared.llm.openai_sse import DataDecoder

STREAM = (
    b": keep-alive\n\n"
    b'data: {"a":1}\n\n'
    b"event: ignored\nid: 7\ndata:{\"b\":2}\n\n"
    b"data: line one\ndata:  two\n\n"
    b"retry: 10\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [b'{"a":1}', b'{"b":2}', b"line one\n two", b"[DONE]"]


def _feed(decoder: DataDecoder, stream: bytes, size: int) -> list[bytes]:
    out: list[bytes] = []
    for start in range(0, len(stream), size):
        out += decoder.feed(stream[start : start + size])
    return out + decoder.end()


@pytest.mark.parametrize("size", [1, 2, 3, 5, 16, 1000])
@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_any_slicing_and_line_ending_gives_the_same_data(size: int, newline: bytes) -> None:
    stream = STREAM.replace(b"\n", newline)
    assert _feed(DataDecoder(), stream, size) == EXPECTED


def test_an_event_cut_off_by_the_end_is_not_delivered() -> None:
    decoder = DataDecoder()
    assert decoder.feed(b'data: {"a":1}\n\ndata: {"b"') == [b'{"a":1}']
    assert decoder.feed(b":2}\n") == []


def test_utf8_split_across_reads_stays_whole() -> None:
    raw = 'data: {"t":"é✓"}\n\n'.encode()
    assert _feed(DataDecoder(), raw, 1) == ['{"t":"é✓"}'.encode()]
