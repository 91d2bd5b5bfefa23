"""Files in an A2A message: what the model is given, and what is refused."""

from __future__ import annotations

import base64

import pytest

from agent_service.a2a.attachments import MAX_INLINE_CHARS, file_text
from agent_service.a2a.errors import ContentTypeNotSupported, InvalidParams
from agent_service.a2a.inbound import message_text
from agent_service.a2a.media import accepts, is_media_range
from agent_service.a2a.schemas import Message, Part

ANY = ["*/*"]


def _raw(data: bytes, media_type: str | None, filename: str | None = None) -> Part:
    return Part(raw=base64.b64encode(data).decode(), media_type=media_type, filename=filename)


def test_a_text_file_is_read_inline_and_a_long_one_is_cut_visibly() -> None:
    csv = file_text(_raw(b"city,days\nLisbon,3\n", "text/csv", "trip.csv"), ANY)
    assert csv == "[The user attached trip.csv (text/csv, 19 bytes):]\ncity,days\nLisbon,3\n"
    assert "Lisbon" in file_text(_raw(b'{"city": "Lisbon"}', "application/ld+json; charset=utf-8"), ANY)

    long = file_text(_raw(b"z" * (MAX_INLINE_CHARS + 5), "text/plain"), ANY)
    assert long.count("z") == MAX_INLINE_CHARS and long.endswith("[... cut: the file goes on]")


def test_a_file_the_agent_cannot_read_is_named_to_the_model_not_dropped() -> None:
    pdf = file_text(_raw(b"%PDF-1.7 \x00\x01", "application/pdf", "plan.pdf"), ANY)
    assert pdf == ("[The user attached plan.pdf (application/pdf, 11 bytes); "
                   "its content is not text and cannot be read here.]")
    link = file_text(Part(url="https://files.example/plan.pdf", media_type="application/pdf"), ANY)
    assert link == "[The user linked a file (application/pdf): https://files.example/plan.pdf]"
    untyped = file_text(_raw(b"\x00", None), ANY)
    assert "(application/octet-stream, 1 bytes)" in untyped


def test_a_type_outside_the_setting_is_refused_as_the_spec_asks() -> None:
    with pytest.raises(ContentTypeNotSupported, match="application/pdf are not accepted: this agent takes text/\\*"):
        file_text(_raw(b"%PDF", "application/pdf"), ["text/*"])
    with pytest.raises(ContentTypeNotSupported, match="takes no files"):
        file_text(_raw(b"a", "text/plain"), [])
    assert file_text(_raw(b"a", "TEXT/Plain"), ["text/*"]).endswith("\na")


def test_bad_files_get_a_clear_error() -> None:
    with pytest.raises(InvalidParams, match="base64"):
        file_text(Part(raw="not base64!", media_type="text/plain"), ANY)
    with pytest.raises(InvalidParams, match="not UTF-8"):
        file_text(_raw(b"\xff\xfe", "text/plain", "notes.txt"), ANY)
    with pytest.raises(InvalidParams, match="not a media type"):
        file_text(_raw(b"a", "pdf"), ANY)


def test_a_message_reads_its_parts_in_order() -> None:
    message = Message(message_id="m", role="ROLE_USER", parts=[
        Part(text="Plan my trip from this:"), _raw(b"Lisbon, 3 days", "text/plain", "notes.txt"),
        Part(data={"budget": 900}),
    ])
    assert message_text(message, ANY) == (
        "Plan my trip from this:\n[The user attached notes.txt (text/plain, 14 bytes):]\nLisbon, 3 days\n"
        '{"budget":900}'
    )


@pytest.mark.parametrize(("value", "ok"), [
    ("*/*", True), ("text/*", True), ("application/pdf", True), ("*/json", False), ("pdf", False),
    ("text/", False), ("/plain", False), ("a/b/c", False),
])
def test_media_ranges(value: str, ok: bool) -> None:
    assert is_media_range(value) is ok


def test_ranges_match_by_type_and_subtype() -> None:
    assert accepts(["image/*"], "image/png") and not accepts(["image/*"], "text/png")
    assert accepts(["application/pdf"], "application/pdf") and not accepts(["application/pdf"], "application/json")
