"""``create_file``: a file the model writes, handed to the user beside the answer.

The content is text (UTF-8), or base64 for a binary file. The run emits it as an ARTIFACT (``text``
or ``bytes``); the model reads a receipt (name, media type, size), not its own content again.
"""

from __future__ import annotations

import binascii
from typing import Any, ClassVar

from agent_service.tools.artifacts import (
    DESCRIPTION_SCHEMA,
    MEDIA_TYPE_SCHEMA,
    NAME_SCHEMA,
    description,
    file_name,
    media_type,
    new_artifact_id,
    within,
)
from agent_service.tools.base import Tool, ToolContext, ToolError, ToolOutput
from shared.protocol import ArtifactData


class CreateFileTool(Tool):
    name = "create_file"
    description = (
        "Write a file for the user to download (notes, a CSV table, code, an SVG drawing...). They get "
        "it beside your answer. Give 'content' as text, or as base64 with encoding 'base64' for a binary file."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "name": NAME_SCHEMA,
            "content": {"type": "string", "description": "The whole content of the file"},
            "encoding": {"type": "string", "enum": ["text", "base64"], "description": "text (default) or base64"},
            "media_type": MEDIA_TYPE_SCHEMA,
            "description": DESCRIPTION_SCHEMA,
        },
        "required": ["name", "content"],
        "additionalProperties": False,
    }

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        name = file_name(args.get("name"))
        content = args.get("content")
        if not isinstance(content, str):
            raise ToolError("'content' (a string) is required")
        encoding = args.get("encoding", "text")
        if encoding == "text":
            try:
                size = len(content.encode("utf-8"))
            except UnicodeEncodeError:
                raise ToolError("'content' is not valid text (use encoding base64 for binary content)") from None
            kind, fallback, body = "text", "text/plain", content
        elif encoding == "base64":
            # Models wrap long base64 in lines: whitespace is not part of the content.
            body = "".join(content.split())
            try:
                size = len(binascii.a2b_base64(body, strict_mode=True))
            except binascii.Error:
                raise ToolError("'content' is not base64 (encoding 'base64')") from None
            kind, fallback = "bytes", "application/octet-stream"
        else:
            raise ToolError("'encoding' is text or base64")
        within(size, self._max_bytes, f"the file {name}")
        media = media_type(args.get("media_type"), name, fallback)
        artifact = ArtifactData(
            artifact_id=new_artifact_id(), name=name, media_type=media, description=description(args.get("description")),
            **{kind: body},
        )
        receipt = {"artifact_id": artifact.artifact_id, "name": name, "media_type": media, "size": size,
                   "handed_to_user": True}
        return ToolOutput(receipt, (artifact,))
