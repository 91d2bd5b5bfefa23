"""The frames the service sends and what the chat page reads of them agree.

Every frame type's data is one class in ``realtime.frames`` (``FRAME_DATA``); the page reads frames in
``ChatView.onFrame`` (chat.js), a question card's data in ``QuestionCard`` (cards.js) and a wait's in
``Countdown.start`` (waiting.js). Each field the page reads of a frame must be one the service sends
in that frame type, so a field renamed or misspelt on either side fails here.
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from conversation_service.messages.schemas import MessageOut
from conversation_service.realtime.frames import FRAME_DATA, FrameType, MessageCreated

UI = Path(__file__).resolve().parents[4] / "conversation_service" / "ui"
# What the page itself adds to a card's data before reading it (not sent by the service).
PAGE_ONLY = {"shownAbove"}


def _on_frame_cases() -> dict[str, str]:
    """The body of each ``case "<type>":`` of ``onFrame``'s switch."""
    source = (UI / "chat.js").read_text()
    body = source[source.index("  onFrame(frame) {"):]
    body = body[: body.index("\n  }\n")]
    parts = re.split(r'\n\s*case "([a-z._]+)":', body)
    return {parts[i]: parts[i + 1].split("default:")[0] for i in range(1, len(parts), 2)}


def _read(source: str, name: str) -> set[str]:
    return set(re.findall(rf"\b{name}\.([a-z_A-Z]+)", source))


def _sent(type_: str) -> set[str]:
    cls = FRAME_DATA[type_]
    if cls is MessageCreated:
        return set(MessageOut.model_fields)
    return {f.name for f in fields(cls)}


def _page_reads(type_: str, body: str) -> set[str]:
    read = _read(body, "d")
    if "view()" in body:
        read.add("message_id")  # view() finds the message the frame is about by it
    if type_ == FrameType.AGENT_ASK_USER:  # askUser(d) and its QuestionCard
        read |= _read((UI / "chat.js").read_text().split("  askUser(data, messageId) {")[1].split("\n  }\n")[0], "data")
        read |= _read((UI / "cards.js").read_text(), "data")
    if type_ == FrameType.AGENT_WAITING:  # countdown.start(d, ...)
        read |= _read((UI / "waiting.js").read_text(), "data")
    return read - PAGE_ONLY


def test_every_frame_type_the_page_reads_is_one_the_service_sends() -> None:
    assert set(_on_frame_cases()) <= set(FRAME_DATA)


@pytest.mark.parametrize("type_", sorted(_on_frame_cases()))
def test_the_page_reads_only_fields_the_service_sends(type_: str) -> None:
    missing = _page_reads(type_, _on_frame_cases()[type_]) - _sent(type_)
    assert not missing, f"the page reads {sorted(missing)} of {type_}, which the service does not send"


def test_a_frame_s_data_has_exactly_its_fields() -> None:
    # Optional keys (a direct delta's offset, a notice's question) are left out when unset.
    for type_, cls in FRAME_DATA.items():
        if cls is MessageCreated:
            continue
        assert FRAME_DATA[cls.TYPE] is cls and cls.TYPE == type_
        names = {f.name for f in fields(cls)}
        required = {f.name for f in fields(cls) if f.default is not None}
        example = cls(**{name: f"v-{name}" for name in names})
        assert required <= set(example.data()) <= names
