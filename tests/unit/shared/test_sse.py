"""SSE encoding and incremental decoding, including awkward slicings of the byte stream."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import orjson
import pytest

from shared.protocol import EventEnvelope, EventType
from shared.sse import (
    SSEDecoder,
    decode_envelope,
    encode,
    encode_comment,
    encode_envelope,
    encode_retry,
)

TS = datetime(2026, 1, 2, tzinfo=UTC)


def _envelope(seq: int, text: str = "hi") -> EventEnvelope:
    return EventEnvelope(session_id="s", run_id="r", seq=seq, type=EventType.ANSWER_CHUNK, ts=TS, data={"text": text})


def test_envelope_round_trip_with_id_and_event() -> None:
    env = _envelope(3, "multi\nline ünïcode")
    raw = encode_envelope(env, retry_ms=1500)
    decoder = SSEDecoder()
    [event] = decoder.feed(raw)
    assert event.id == "3" and event.event == "ANSWER_CHUNK" and event.retry == 1500
    assert decode_envelope(event) == env
    assert decoder.last_event_id == "3" and not decoder.has_partial_event


@pytest.mark.parametrize(
    "ts",
    [
        TS,
        datetime(2026, 1, 2, 3, 4, 5, 120, tzinfo=UTC),
        datetime(2026, 1, 2, 3, 4, 5, 500000, tzinfo=timezone(timedelta(hours=2))),
        datetime(2026, 1, 2, 3, 4, 5, 7),  # naive, as some drivers read it back
    ],
)
@pytest.mark.parametrize("retry_ms", [None, 2500])
def test_envelope_bytes_are_the_pydantic_dump_of_the_envelope(ts: datetime, retry_ms: int | None) -> None:
    # The wire format is the contract: the direct encoder must give exactly what the model's own
    # JSON dump framed by the generic encoder gives.
    env = EventEnvelope(
        session_id="s", run_id="r", seq=42, type=EventType.TOOL_END, ts=ts,
        data={"call_id": "c", "result": {"n": 1.5, "list": [None, True], "text": "a\nb\u2028\"é"}},
    )
    expected = encode(
        orjson.dumps(env.model_dump(mode="json")).decode(), event="TOOL_END", id=42, retry_ms=retry_ms
    )
    assert encode_envelope(env, retry_ms=retry_ms) == expected


def test_multi_line_data_is_rejoined() -> None:
    raw = encode("line one\nline two\n\nline four", event="x", id=1)
    assert raw.count(b"data: ") == 4
    [event] = SSEDecoder().feed(raw)
    assert event.data == "line one\nline two\n\nline four"


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64])
def test_any_slicing_gives_the_same_events(size: int) -> None:
    stream = encode_retry(2000) + encode_comment("heartbeat") + b"".join(
        encode_envelope(_envelope(i, "é" * i)) for i in range(1, 6)
    )
    decoder = SSEDecoder()
    events = []
    for start in range(0, len(stream), size):
        events += decoder.feed(stream[start : start + size])
    assert [decode_envelope(e).seq for e in events] == [1, 2, 3, 4, 5]
    assert decoder.comments == 1
    assert not decoder.has_partial_event


def test_truncated_last_event_is_not_delivered() -> None:
    stream = encode_envelope(_envelope(1)) + encode_envelope(_envelope(2))
    cut = stream[: len(stream) - 1]  # the blank line that ends event 2 never arrives
    decoder = SSEDecoder()
    events = decoder.feed(cut)
    assert [decode_envelope(e).seq for e in events] == [1]
    assert decoder.has_partial_event
    assert decoder.last_event_id == "1"


def test_crlf_and_cr_line_endings() -> None:
    decoder = SSEDecoder()
    events = decoder.feed(b"id: 1\r\nevent: a\r\ndata: x\r\n\r")
    events += decoder.feed(b"\nid: 2\revent: b\rdata: y\r\r")
    # A trailing lone CR may be the first half of CRLF: the decoder waits for the next byte.
    assert len(events) == 1
    events += decoder.feed(b"\n")
    assert [(e.id, e.event, e.data) for e in events] == [("1", "a", "x"), ("2", "b", "y")]


def test_comments_only_and_events_without_data_dispatch_nothing() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(encode_comment("a\nb") + b"event: x\n\n") == []
    assert decoder.comments == 2


def test_mismatched_id_and_seq_is_rejected() -> None:
    raw = encode(_envelope(5).model_dump_json(), event="ANSWER_CHUNK", id=6)
    [event] = SSEDecoder().feed(raw)
    with pytest.raises(ValueError):
        decode_envelope(event)


def test_invalid_payload_is_rejected() -> None:
    env = EventEnvelope(session_id="s", run_id="r", seq=1, type=EventType.TOOL_START, ts=TS, data={})
    [event] = SSEDecoder().feed(encode_envelope(env))
    with pytest.raises(ValueError):
        decode_envelope(event)


def test_a_burst_fed_at_every_split_point_decodes_the_same():
    """One network read may hold many events, cut anywhere (inside CRLF too)."""
    from shared.sse import SSEDecoder

    # A lone CR at the very end could be half of a CRLF, so the wire ends with a comment line.
    wire = b"id: 1\r\nevent: A\r\ndata: x\r\n\r\nid: 2\ndata: y\ndata: z\n\n: hb\n\nid: 3\rdata: w\r\r: end\n"
    expected = [(e.id, e.event, e.data) for e in SSEDecoder().feed(wire)]
    assert expected == [("1", "A", "x"), ("2", "message", "y\nz"), ("3", "message", "w")]
    for cut in range(1, len(wire)):
        decoder = SSEDecoder()
        events = decoder.feed(wire[:cut]) + decoder.feed(wire[cut:])
        assert [(e.id, e.event, e.data) for e in events] == expected, cut
