"""``decode_event``: one validation per answer chunk, and the same verdicts as the payload models."""

from __future__ import annotations

import orjson
import pydantic
import pytest

from conversation_service.agent_client.stream import decode_event
from shared.protocol import AnswerChunkData, EventType
from shared.sse import ServerSentEvent


def chunk(data: object, seq: int = 3) -> ServerSentEvent:
    envelope = {"session_id": "s", "run_id": "r", "seq": seq, "type": "ANSWER_CHUNK",
                "ts": "2026-01-01T00:00:00Z", "data": data}
    return ServerSentEvent("ANSWER_CHUNK", orjson.dumps(envelope).decode(), str(seq))


def test_the_direct_check_covers_every_field_of_the_chunk_model() -> None:
    # decode_event checks the chunk's one field by hand; a field added to the model must be added there.
    assert set(AnswerChunkData.model_fields) == {"text"}


@pytest.mark.parametrize(
    "data", [{"text": "hi"}, {"text": ""}, {"text": "x", "extra": 1}, {}, {"text": 7}, {"text": None}, {"text": ["a"]}]
)
def test_chunks_are_accepted_exactly_when_the_model_accepts_them(data: dict) -> None:
    try:
        AnswerChunkData.model_validate(data)
        model_accepts = True
    except pydantic.ValidationError:
        model_accepts = False
    if model_accepts:
        event = decode_event(chunk(data))
        assert event.type is EventType.ANSWER_CHUNK and event.payload() == AnswerChunkData.model_validate(data)
    else:
        with pytest.raises(ValueError):
            decode_event(chunk(data))


def test_the_sse_id_must_match_the_seq() -> None:
    sse = chunk({"text": "a"}, seq=3)
    sse.id = "4"
    with pytest.raises(ValueError, match="does not match"):
        decode_event(sse)


def test_a_nul_from_the_agent_arrives_as_the_replacement_character() -> None:
    # PostgreSQL could not store it in the reply or its frames (shared.storable).
    assert decode_event(chunk({"text": "a\x00b"})).data == {"text": "a\ufffdb"}
    tool_end = {"session_id": "s", "run_id": "r", "seq": 4, "type": "TOOL_END", "ts": "2026-01-01T00:00:00Z",
                "data": {"call_id": "c", "tool": "t", "ok": True, "result": {"out\x00": ["\x00"]}, "duration_ms": 1.0}}
    event = decode_event(ServerSentEvent("TOOL_END", orjson.dumps(tool_end).decode(), "4"))
    assert event.data["result"] == {"out\ufffd": ["\ufffd"]}
