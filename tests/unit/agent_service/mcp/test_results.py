"""A tool result of an MCP server as the model reads it, and what it hands the user."""

from __future__ import annotations

import base64

import mcp_types as types
import pytest

from agent_service.mcp.results import Reader, ResultTooLarge
from agent_service.tools.base import ToolError

PNG = base64.b64encode(b"\x89PNG" + bytes(100)).decode()


def _read(*blocks, structured=None, is_error=False, cap=10_000, artifact_cap=1024):
    result = types.CallToolResult(content=list(blocks), structured_content=structured, is_error=is_error)
    return Reader("ops", cap, artifact_cap).read("ops_tool", result)


def test_text_and_structured_content() -> None:
    assert _read(types.TextContent(type="text", text="a"), types.TextContent(type="text", text="b")).result == "a\nb"
    same = _read(types.TextContent(type="text", text='{"t": 1}'), structured={"t": 1})
    assert same.result == {"t": 1}, "the text copy of structured content is not read twice"
    both = _read(types.TextContent(type="text", text="see the table"), structured={"t": 1})
    assert both.result == {"text": "see the table", "structured_content": {"t": 1}}


def test_files_and_links_are_artifacts_the_model_reads_a_receipt_of() -> None:
    output = _read(
        types.ImageContent(type="image", data=PNG, mime_type="image/png"),
        types.EmbeddedResource(type="resource", resource=types.TextResourceContents(
            uri="file:///srv/notes.md", mime_type="text/markdown", text="# Notes")),
        types.ResourceLink(type="resource_link", uri="https://example.com/report.pdf", name="report",
                           mime_type="application/pdf"),
        types.ResourceLink(type="resource_link", uri="file:///etc/passwd", name="passwd"),
    )
    image, notes, link = output.artifacts
    assert (image.name, image.media_type, image.bytes) == ("image.png", "image/png", PNG)
    assert (notes.name, notes.text) == ("notes.md", "# Notes")
    assert (link.url, link.media_type) == ("https://example.com/report.pdf", "application/pdf")
    assert "handed to the user as the file 'image.png'" in output.result and "# Notes" in output.result
    assert "file:///etc/passwd" in output.result and "shown to the user as a link" in output.result


def test_what_does_not_fit_is_said_not_handed_over() -> None:
    big = base64.b64encode(bytes(5000)).decode()
    output = _read(types.ImageContent(type="image", data=big, mime_type="image/png"),
                   types.AudioContent(type="audio", data="not base64!", mime_type="audio/wav"))
    assert output.artifacts == ()
    assert "5000 bytes; too large to hand to the user" in output.result and "not valid base64" in output.result
    with pytest.raises(ResultTooLarge, match="over this server's cap of 100 bytes"):
        _read(types.TextContent(type="text", text="x" * 101), cap=100)


def test_an_error_result_is_the_tools_error() -> None:
    with pytest.raises(ToolError, match="no such ticket"):
        _read(types.TextContent(type="text", text="no such ticket"), is_error=True)
    with pytest.raises(ToolError, match="gave no reason"):
        _read(is_error=True)
