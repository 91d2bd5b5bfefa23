"""What the tools that hand the user something (``create_file``, ``share_link``, ``emit_data``) check
alike: a file name, a media type, a size within the service's ``artifact_max_bytes``.

Each such tool returns a ``ToolOutput`` whose artifact the run emits as an ARTIFACT event; the model
reads a short receipt instead of the content (it wrote it, or it is a link).
"""

from __future__ import annotations

import mimetypes
import re
import uuid
from typing import Any

from agent_service.tools.base import ToolError

MAX_NAME_CHARS = 255
MAX_DESCRIPTION_CHARS = 1000
# type/subtype as RFC 6838 allows their names; parameters (;charset=...) are not taken.
_MEDIA_TYPE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$")
# The standard library's own table, not the host's /etc/mime.types: the same name gives the same
# type on every machine. Plus a few types the table lacks that a model writes often.
_TYPES = mimetypes.MimeTypes()
for _type, _suffix in (("text/markdown", ".md"), ("application/yaml", ".yaml"), ("application/yaml", ".yml")):
    _TYPES.add_type(_type, _suffix)

NAME_SCHEMA: dict[str, Any] = {
    "type": "string", "description": "The file name the user sees, e.g. notes.md", "maxLength": MAX_NAME_CHARS,
}
MEDIA_TYPE_SCHEMA: dict[str, Any] = {
    "type": "string", "description": "Its media type, e.g. text/csv; guessed from the name when omitted",
    "maxLength": 255,
}
DESCRIPTION_SCHEMA: dict[str, Any] = {
    "type": "string", "description": "One line saying what it is", "maxLength": MAX_DESCRIPTION_CHARS,
}


def new_artifact_id() -> str:
    return uuid.uuid4().hex


def file_name(value: Any) -> str:
    """A name to save the artifact under: one file name, no folders, nothing unprintable."""
    if not isinstance(value, str) or not value.strip():
        raise ToolError("'name' (a file name such as notes.md) is required")
    name = value.strip()
    if len(name) > MAX_NAME_CHARS:
        raise ToolError(f"the name is too long (at most {MAX_NAME_CHARS} characters)")
    if name in (".", "..") or any(ch in "/\\" or ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise ToolError("'name' is a file name without folders (no / or \\) or control characters")
    return name


def media_type(value: Any, name: str, fallback: str) -> str:
    """``value`` checked, or the type the name's suffix says, or ``fallback``."""
    if value is None:
        return _TYPES.guess_type(name, strict=False)[0] or fallback
    if not isinstance(value, str) or not _MEDIA_TYPE.match(value.strip().lower()):
        raise ToolError("'media_type' is a media type such as text/plain or image/png")
    return value.strip().lower()


def description(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_DESCRIPTION_CHARS:
        raise ToolError(f"'description' is a string of at most {MAX_DESCRIPTION_CHARS} characters")
    return value.strip() or None


def within(size: int, limit: int, what: str) -> None:
    if size > limit:
        raise ToolError(f"{what} is {size} bytes; at most {limit} bytes can be handed to the user")
