"""The tools that hand the user something: ``create_file``, ``share_link``, ``emit_data``, and the
``reply`` the run engine intercepts. What each makes, and what each refuses with an error the model reads."""

from __future__ import annotations

import base64

import pytest

from agent_service.tools.base import ToolContext, ToolError, ToolOutput
from agent_service.tools.create_file import CreateFileTool
from agent_service.tools.emit_data import EmitDataTool
from agent_service.tools.reply import MAX_REPLY_CHARS, validate_reply
from agent_service.tools.share_link import ShareLinkTool
from shared.protocol import ArtifactData, UserContext

CTX = ToolContext(session_id="s", run_id="r", user_context=UserContext(user_id="u"))
LIMIT = 2048


def _only(output: ToolOutput) -> ArtifactData:
    assert isinstance(output, ToolOutput) and len(output.artifacts) == 1
    artifact = output.artifacts[0]
    # The model reads a receipt naming the artifact, never the content again.
    assert output.result["artifact_id"] == artifact.artifact_id and output.result["handed_to_user"] is True
    return artifact


async def test_a_text_file_is_its_text_with_the_type_its_name_says() -> None:
    output = await CreateFileTool(LIMIT).run({"name": "notes.md", "content": "# Trip\nLisbon ✓"}, CTX)

    artifact = _only(output)
    assert (artifact.name, artifact.media_type, artifact.text) == ("notes.md", "text/markdown", "# Trip\nLisbon ✓")
    assert artifact.bytes is None and output.result["size"] == len("# Trip\nLisbon ✓".encode())


async def test_a_binary_file_is_base64_and_its_size_is_the_decoded_one() -> None:
    raw = bytes(range(256))
    wrapped = base64.encodebytes(raw).decode()  # with line breaks, as models write it
    output = await CreateFileTool(LIMIT).run({"name": "blob", "content": wrapped, "encoding": "base64"}, CTX)

    artifact = _only(output)
    assert base64.b64decode(artifact.bytes) == raw and "\n" not in artifact.bytes
    assert artifact.media_type == "application/octet-stream" and output.result["size"] == 256


async def test_a_named_media_type_wins_over_the_guess() -> None:
    output = await CreateFileTool(LIMIT).run(
        {"name": "out.txt", "content": "a,b", "media_type": "Text/CSV", "description": "two columns"}, CTX,
    )
    artifact = _only(output)
    assert (artifact.media_type, artifact.description) == ("text/csv", "two columns")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"content": "x"}, "'name'"),
        ({"name": "../etc/passwd", "content": "x"}, "without folders"),
        ({"name": "a\\b.txt", "content": "x"}, "without folders"),
        ({"name": "bell\x07.txt", "content": "x"}, "control characters"),
        ({"name": "x" * 256, "content": "x"}, "too long"),
        ({"name": "a.txt"}, "'content'"),
        ({"name": "a.txt", "content": "x", "encoding": "utf-16"}, "text or base64"),
        ({"name": "a.bin", "content": "not base64!", "encoding": "base64"}, "not base64"),
        ({"name": "a.txt", "content": "x", "media_type": "text/plain; charset=utf-8"}, "media type"),
        ({"name": "a.txt", "content": "x" * (LIMIT + 1)}, f"at most {LIMIT} bytes"),
        ({"name": "a.txt", "content": "é" * (LIMIT // 2 + 1)}, f"at most {LIMIT} bytes"),
        ({"name": "a.txt", "content": "\ud800"}, "not valid text"),
    ],
)
async def test_create_file_refuses_what_it_cannot_hand_over(args: dict, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        await CreateFileTool(LIMIT).run(args, CTX)


async def test_a_link_is_named_after_its_file_and_typed_by_it() -> None:
    artifact = _only(await ShareLinkTool().run({"url": "https://example.com/files/report%202026.pdf"}, CTX))
    assert (artifact.url, artifact.name, artifact.media_type) == (
        "https://example.com/files/report%202026.pdf", "report 2026.pdf", "application/pdf",
    )
    page = _only(await ShareLinkTool().run({"url": "http://example.com/", "name": "Example"}, CTX))
    assert (page.name, page.media_type) == ("Example", "text/html")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("javascript:alert(1)", "http or https"),
        ("file:///etc/passwd", "http or https"),
        ("https://", "with a host"),
        ("https://user:secret@example.com/x", "user name or password"),
        ("https://example.com/a b", "without spaces"),
        ("https://example.com/" + "a" * 2048, "at most 2048"),
        ("https://[::1/", "not a valid link"),
        (None, "required"),
    ],
)
async def test_share_link_refuses_links_a_browser_should_not_open(url: str | None, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        await ShareLinkTool().run({"url": url}, CTX)


async def test_data_is_the_object_as_given() -> None:
    output = await EmitDataTool(LIMIT).run({"data": {"key": "value", "count": 42}, "name": "result.json"}, CTX)
    artifact = _only(output)
    assert (artifact.data, artifact.name, artifact.media_type) == (
        {"key": "value", "count": 42}, "result.json", "application/json",
    )
    assert _only(await EmitDataTool(LIMIT).run({"data": {}}, CTX)).name == "data.json"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"data": [1, 2]}, "JSON object"),
        ({"data": "text"}, "JSON object"),
        ({"data": {"rows": "x" * LIMIT}}, f"at most {LIMIT} bytes"),
        ({"data": {"a": 1}, "name": "a/b"}, "without folders"),
    ],
)
async def test_emit_data_refuses_what_is_not_a_small_object(args: dict, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        await EmitDataTool(LIMIT).run(args, CTX)


def test_a_reply_is_non_empty_bounded_text() -> None:
    assert validate_reply({"text": "Hello!"}) == "Hello!"
    for args, message in (({}, "required"), ({"text": "  "}, "required"),
                          ({"text": "x" * (MAX_REPLY_CHARS + 1)}, "too long")):
        with pytest.raises(ToolError, match=message):
            validate_reply(args)
