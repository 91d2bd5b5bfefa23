"""The wire contract: every model survives a JSON round trip, and bad input is refused."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from shared.protocol import (
    EVENT_DATA_MODELS,
    MAX_ARTIFACT_BYTES,
    MAX_HISTORY_MESSAGES,
    AnswerChunkData,
    ArtifactData,
    AskUserData,
    AskUserKind,
    CompleteData,
    ErrorData,
    EventEnvelope,
    EventType,
    ExecuteRequest,
    RunResumedData,
    SessionStatus,
    SessionStatusResponse,
    ThoughtData,
    ToolEndData,
    ToolStartData,
    Usage,
    WaitingData,
)

TS = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

PAYLOADS = {
    EventType.THOUGHT: ThoughtData(text="I should add.", step=1),
    EventType.TOOL_START: ToolStartData(call_id="c1", tool="calculator", args={"expression": "17*23"}),
    EventType.TOOL_END: ToolEndData(call_id="c1", tool="calculator", ok=True, result={"result": 391}, duration_ms=0.4),
    EventType.ANSWER_CHUNK: AnswerChunkData(text="391"),
    EventType.ASK_USER: AskUserData(
        question_id="q1", question="Where?", expires_at=TS, kind=AskUserKind.APPROVAL, tool="calculator",
        args={"expression": "1+1"},
    ),
    EventType.COMPLETE: CompleteData(answer="17*23 = 391.", usage=Usage(prompt_tokens=5, completion_tokens=3, total_tokens=8)),
    EventType.ERROR: ErrorData(code="LLM_UNAVAILABLE", message="down", retryable=True),
    EventType.WAITING: WaitingData(reason="rate limit of 2 requests per 60 s reached", wait_s=12.5, limit="requests"),
    EventType.ARTIFACT: ArtifactData(artifact_id="a1", name="notes.md", media_type="text/markdown", call_id="c1",
                                     text="# Notes"),
    EventType.RUN_RESUMED: RunResumedData(checkpoint_seq=12, answer_chars=40, continuation=1, step=2),
}


def test_every_event_type_has_a_payload_model() -> None:
    assert set(EVENT_DATA_MODELS) == set(EventType) == set(PAYLOADS)


@pytest.mark.parametrize("event_type", list(EventType))
def test_envelope_round_trip(event_type: EventType) -> None:
    payload = PAYLOADS[event_type]
    envelope = EventEnvelope(
        session_id="s1", run_id="r1", seq=7, type=event_type, ts=TS, data=payload.model_dump(mode="json")
    )
    parsed = EventEnvelope.model_validate_json(envelope.model_dump_json())
    assert parsed == envelope
    assert parsed.payload() == payload
    assert parsed.is_terminal == (event_type in {EventType.COMPLETE, EventType.ERROR, EventType.ASK_USER})


def test_envelope_rejects_bad_payload_and_seq() -> None:
    bad = EventEnvelope(session_id="s", run_id="r", seq=1, type=EventType.TOOL_END, ts=TS, data={"ok": True})
    with pytest.raises(ValidationError):
        bad.payload()
    with pytest.raises(ValidationError):
        EventEnvelope(session_id="s", run_id="r", seq=0, type=EventType.THOUGHT, ts=TS, data={})
    with pytest.raises(ValidationError):
        EventEnvelope.model_validate({"session_id": "s", "run_id": "r", "seq": 1, "type": "NOPE", "ts": TS, "data": {}})


def test_execute_request_round_trip_and_defaults() -> None:
    request = ExecuteRequest.model_validate(
        {
            "session_id": "s1",
            "message": "what is 17*23",
            "chat_history": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
            "user_context": {"user_id": "u1", "org_id": "o1", "permissions": ["read"]},
            "answer": {"question_id": "q1", "text": "Lisbon"},
            "metadata": {"conversation_id": "c1"},
        }
    )
    assert ExecuteRequest.model_validate_json(request.model_dump_json()) == request
    minimal = ExecuteRequest.model_validate({"message": "hi", "user_context": {"user_id": "u"}})
    assert minimal.profile_name == "default" and minimal.answer is None and minimal.chat_history == []


@pytest.mark.parametrize(
    "body",
    [
        {"message": "hi"},  # user_context is required
        {"message": "hi", "user_context": {"user_id": ""}},
        {"message": "hi", "user_context": {"user_id": "u"}, "unknown": 1},
        {"message": "hi", "user_context": {"user_id": "u"}, "chat_history": [{"role": "tool", "content": "x"}]},
        {"message": "hi", "user_context": {"user_id": "u"}, "metadata": {str(i): i for i in range(51)}},
        {"message": "hi", "user_context": {"user_id": "u"},
         "chat_history": [{"role": "user", "content": "x"}] * (MAX_HISTORY_MESSAGES + 1)},
        {"message": "hi", "user_context": {"user_id": "u"}, "answer": {"question_id": "", "text": "x"}},
    ],
)
def test_execute_request_rejects(body: dict) -> None:
    with pytest.raises(ValidationError):
        ExecuteRequest.model_validate(body)


def test_session_status_round_trip() -> None:
    status = SessionStatusResponse(
        session_id="s", profile_name="default", status=SessionStatus.AWAITING_USER,
        pending_question={"question_id": "q", "question": "Where?", "expires_at": TS}, last_seq=4,
        current_run_id="r", created_at=TS, updated_at=TS,
    )
    assert SessionStatusResponse.model_validate_json(status.model_dump_json()) == status


def test_a_complete_reads_as_before_unless_the_reply_was_direct() -> None:
    assert "direct" not in CompleteData(answer="hi").model_dump(mode="json")
    direct = CompleteData(answer="hi", direct=True)
    assert direct.model_dump(mode="json")["direct"] is True
    assert CompleteData.model_validate_json(direct.model_dump_json()) == direct


def test_an_artifact_is_one_of_text_bytes_url_data_and_absent_fields_are_left_out() -> None:
    artifact = ArtifactData(artifact_id="a", name="x.bin", media_type="application/octet-stream", bytes="AAH/")
    assert artifact.model_dump(mode="json") == {
        "artifact_id": "a", "name": "x.bin", "media_type": "application/octet-stream", "bytes": "AAH/",
    }
    link = ArtifactData(artifact_id="a", name="x", media_type="text/html", url="HTTPS://example.com/")
    assert ArtifactData.model_validate(link.model_dump(mode="json")) == link


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({}, "exactly one"),
        ({"text": "a", "url": "https://x.org/"}, "exactly one"),
        ({"bytes": "not base64!"}, "not base64"),
        ({"bytes": "AAH/\n"}, "not base64"),
        ({"url": "javascript:alert(1)"}, "http or https"),
        ({"url": "data:text/html,<script>alert(1)</script>"}, "http or https"),
        ({"data": [1, 2]}, "dictionary"),
        ({"text": "x" * (MAX_ARTIFACT_BYTES + 1)}, "at most"),
    ],
)
def test_an_artifact_from_the_wire_is_checked_as_untrusted_input(content: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ArtifactData.model_validate({"artifact_id": "a", "name": "x", "media_type": "text/plain", **content})
