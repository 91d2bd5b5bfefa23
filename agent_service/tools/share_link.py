"""``share_link``: a link for the user (a file, a page), handed to them beside the answer.

Only ``http`` and ``https`` links, without credentials in them: the user's browser opens it.
"""

from __future__ import annotations

from typing import Any, ClassVar
from urllib.parse import unquote, urlsplit

from agent_service.tools.artifacts import (
    DESCRIPTION_SCHEMA,
    MEDIA_TYPE_SCHEMA,
    description,
    file_name,
    media_type,
    new_artifact_id,
)
from agent_service.tools.base import Tool, ToolContext, ToolError, ToolOutput
from shared.protocol import ARTIFACT_URL_SCHEMES, MAX_URL_CHARS, ArtifactData


def checked_url(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ToolError("'url' (an http or https link) is required")
    url = value.strip()
    if len(url) > MAX_URL_CHARS or any(ch.isspace() or ord(ch) < 32 for ch in url):
        raise ToolError(f"'url' is one link of at most {MAX_URL_CHARS} characters, without spaces")
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        raise ToolError("'url' is not a valid link") from None
    if parts.scheme.lower() not in ARTIFACT_URL_SCHEMES or not host:
        raise ToolError("'url' is an http or https link with a host, e.g. https://example.com/report.pdf")
    if parts.username is not None or parts.password is not None:
        raise ToolError("'url' must not carry a user name or password")
    return url


def _name_of(url: str) -> str:
    """The link's last path segment, else its host: what the user sees when no name is given."""
    parts = urlsplit(url)
    last = unquote(parts.path.rstrip("/").rsplit("/", 1)[-1])
    try:
        return file_name(last)
    except ToolError:
        return parts.hostname or url


class ShareLinkTool(Tool):
    name = "share_link"
    description = (
        "Hand the user a link to a file or page (for example a report you found), shown beside your "
        "answer. http and https links only."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "url": {"type": "string", "description": "The http(s) link", "maxLength": MAX_URL_CHARS},
            "name": {"type": "string", "description": "What the link is called; its file name when omitted",
                     "maxLength": 255},
            "media_type": MEDIA_TYPE_SCHEMA,
            "description": DESCRIPTION_SCHEMA,
        },
        "required": ["url"],
        "additionalProperties": False,
    }

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        url = checked_url(args.get("url"))
        name = file_name(args["name"]) if args.get("name") is not None else _name_of(url)
        # A link to a page, unless its name says what file it is.
        media = media_type(args.get("media_type"), urlsplit(url).path, "text/html")
        artifact = ArtifactData(
            artifact_id=new_artifact_id(), name=name, media_type=media, url=url,
            description=description(args.get("description")),
        )
        return ToolOutput({"artifact_id": artifact.artifact_id, "name": name, "url": url, "handed_to_user": True},
                          (artifact,))
