"""A tool result of an MCP server as the model reads it, and what it hands the user.

Text comes as text; structured content as the JSON object it is (instead of its text copy, which
servers send for older clients); an image, audio, an embedded resource or a link to one as a
short receipt the model can read and act on, and, where it is a file or a link, as an ``ARTIFACT``
for the user (within the service's artifact cap). A result the server flags ``isError`` is the
tool's error: a failed ``TOOL_END`` the model reads, never a failed run.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any
from urllib.parse import urlsplit

import mcp_types as types
import orjson

from agent_service.tools.artifacts import new_artifact_id
from agent_service.tools.base import ToolError, ToolOutput
from shared.protocol import ArtifactData


class ResultTooLarge(ToolError):
    """The server's result is over its size cap."""


def result_size(result: types.CallToolResult) -> int:
    """About how many bytes the result holds (its text, data and structured content)."""
    size = 0
    for block in result.content:
        size += _block_size(block)
    if result.structured_content is not None:
        size += len(orjson.dumps(result.structured_content, default=str))
    return size


def _block_size(block: Any) -> int:
    if isinstance(block, types.TextContent):
        return len(block.text)
    if isinstance(block, types.ImageContent | types.AudioContent):
        return len(block.data)
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        return len(resource.text) if isinstance(resource, types.TextResourceContents) else len(resource.blob)
    return 256


class Reader:
    """Turns results of one server's tools into ``ToolOutput``s; ``artifact_max_bytes`` bounds a file."""

    def __init__(self, server: str, max_result_bytes: int, artifact_max_bytes: int) -> None:
        self.server = server
        self.max_result_bytes = max_result_bytes
        self.artifact_max_bytes = artifact_max_bytes

    def read(self, tool: str, result: types.CallToolResult) -> ToolOutput:
        size = result_size(result)
        if size > self.max_result_bytes:
            raise ResultTooLarge(
                f"{tool} of MCP server {self.server!r} returned {size} bytes, over this server's cap of "
                f"{self.max_result_bytes} bytes; ask for less (a narrower query, a page of the results)"
            )
        texts: list[str] = []
        artifacts: list[ArtifactData] = []
        for block in result.content:
            texts.append(self._block(block, artifacts))
        text = "\n".join(t for t in texts if t)
        if result.is_error:
            raise ToolError(text or f"{tool} failed (the MCP server {self.server!r} gave no reason)")
        return ToolOutput(result=self._for_model(text, result.structured_content), artifacts=tuple(artifacts))

    @staticmethod
    def _for_model(text: str, structured: dict[str, Any] | None) -> Any:
        """The structured content alone when the text only repeats it (a server writes it for
        older clients: the object as JSON, or its one value, as SDKs wrap a plain return)."""
        if structured is None:
            return text
        if not text or _same_json(text, structured):
            return structured
        if len(structured) == 1:
            value = next(iter(structured.values()))
            if text == value or _same_json(text, value):
                return structured
        return {"text": text, "structured_content": structured}

    def _block(self, block: Any, artifacts: list[ArtifactData]) -> str:
        if isinstance(block, types.TextContent):
            return block.text
        if isinstance(block, types.ImageContent | types.AudioContent):
            kind = "image" if isinstance(block, types.ImageContent) else "audio"
            return self._file(artifacts, f"{kind}{_suffix(block.mime_type)}", block.mime_type, blob=block.data,
                              receipt=kind)
        if isinstance(block, types.ResourceLink):
            return self._link(artifacts, block)
        if isinstance(block, types.EmbeddedResource):
            return self._resource(artifacts, block.resource)
        return f"[{getattr(block, 'type', 'unknown')} content this client does not read]"

    def _resource(self, artifacts: list[ArtifactData], resource: Any) -> str:
        uri = str(resource.uri)
        media_type = resource.mime_type or "application/octet-stream"
        if isinstance(resource, types.TextResourceContents):
            receipt = self._file(artifacts, _name_of(uri), resource.mime_type or "text/plain", text=resource.text,
                                 receipt=f"resource {uri}")
            return f"{receipt}\n{resource.text}"
        return self._file(artifacts, _name_of(uri), media_type, blob=resource.blob, receipt=f"resource {uri}")

    def _link(self, artifacts: list[ArtifactData], link: types.ResourceLink) -> str:
        uri = str(link.uri)
        receipt = f"[link to resource {link.name!r}: {uri}" + (f", {link.mime_type}" if link.mime_type else "") + "]"
        if urlsplit(uri).scheme.lower() in ("http", "https"):
            artifacts.append(ArtifactData(
                artifact_id=new_artifact_id(), name=(link.title or link.name or uri)[:255],
                media_type=(link.mime_type or "text/uri-list")[:255], url=uri,
                description=link.description[:1000] if link.description else None,
            ))
            receipt += " (shown to the user as a link)"
        return receipt

    def _file(
        self, artifacts: list[ArtifactData], name: str, media_type: str, *, receipt: str, text: str | None = None,
        blob: str | None = None,
    ) -> str:
        """A receipt for the model; the file itself for the user when it fits the artifact cap."""
        try:
            size = len(text.encode()) if text is not None else len(base64.b64decode(blob or "", validate=True))
        except (binascii.Error, ValueError):
            return f"[{receipt}: {media_type}, not valid base64; not shown]"
        if size > self.artifact_max_bytes:
            return f"[{receipt}: {media_type}, {size} bytes; too large to hand to the user]"
        artifacts.append(ArtifactData(
            artifact_id=new_artifact_id(), name=name[:255], media_type=media_type[:255] or "application/octet-stream",
            text=text, bytes=blob if text is None else None,
        ))
        return f"[{receipt}: {media_type}, {size} bytes; handed to the user as the file {name!r}]"


def _same_json(text: str, value: Any) -> bool:
    try:
        return orjson.loads(text) == value
    except orjson.JSONDecodeError:
        return False


def _name_of(uri: str) -> str:
    tail = urlsplit(uri).path.rstrip("/").rsplit("/", 1)[-1]
    return tail or "resource"


def _suffix(media_type: str) -> str:
    subtype = media_type.split("/", 1)[-1].split(";", 1)[0].strip()
    return f".{subtype}" if subtype.isalnum() else ""
