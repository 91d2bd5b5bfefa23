"""Files in an A2A message, as the agent reads them.

A client may send files: ``raw`` bytes (base64) or a ``url``, each with a ``mediaType`` and maybe a
``filename``. The agent reads text, so a file of a text type (text/*, JSON, XML, YAML, CSV) sent as
bytes is given to the model inline, decoded as UTF-8 and cut at ``MAX_INLINE_CHARS``; any other
file is named to the model (name, type, size or link), so the agent can say what it cannot open
and answer the rest, as a chat user who attaches a file expects, instead of the whole message
failing. Which media types are taken at all is the operator's choice
(``AGENT_SERVICE_A2A_FILE_TYPES``, media ranges, default ``*/*``); a file of another type is refused
with ContentTypeNotSupportedError, as A2A 1.0 (3.1.1) asks.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence

from agent_service.a2a.errors import ContentTypeNotSupported, InvalidParams
from agent_service.a2a.media import accepts, is_media_range
from agent_service.a2a.schemas import Part

# Enough of a text file for the model to work on; the rest is marked as cut, not dropped silently.
MAX_INLINE_CHARS = 20_000
_TEXT_SUBTYPES = ("json", "xml", "yaml", "csv", "x-yaml", "javascript", "x-python", "x-sh", "toml", "sql")
_UNTYPED = "application/octet-stream"


def file_text(part: Part, accepted: Sequence[str]) -> str:
    """What the model is given for one file part; refused when its type is not accepted."""
    media_type = (part.media_type or _UNTYPED).split(";", 1)[0].strip().lower()
    if not is_media_range(media_type) or "*" in media_type:
        raise InvalidParams(f"mediaType {part.media_type!r} is not a media type (type/subtype)")
    if not accepts(accepted, media_type):
        raise ContentTypeNotSupported(
            f"files of type {media_type} are not accepted: this agent takes {', '.join(accepted) or 'no files'}"
        )
    name = part.filename or "a file"
    if part.url is not None:
        return f"[The user linked {name} ({media_type}): {part.url}]"
    data = _decoded(part.raw or "")
    if _is_text(media_type):
        try:
            content = data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidParams(f"{name} says it is {media_type} but is not UTF-8 text") from None
        cut = len(content) > MAX_INLINE_CHARS
        shown = content[:MAX_INLINE_CHARS] + ("\n[... cut: the file goes on]" if cut else "")
        return f"[The user attached {name} ({media_type}, {len(data)} bytes):]\n{shown}"
    return (f"[The user attached {name} ({media_type}, {len(data)} bytes); "
            "its content is not text and cannot be read here.]")


def _is_text(media_type: str) -> bool:
    kind, _, sub = media_type.partition("/")
    return kind == "text" or sub in _TEXT_SUBTYPES or sub.endswith(("+json", "+xml"))


def _decoded(raw: str) -> bytes:
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidParams("a raw part holds base64 (RFC 4648) bytes") from None
