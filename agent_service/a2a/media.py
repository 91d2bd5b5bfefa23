"""Media types and ranges (RFC 9110 8.3.1, 12.5.1), as the A2A file settings and parts use them.

No imports of the service: the settings validate AGENT_SERVICE_A2A_FILE_TYPES with it.
"""

from __future__ import annotations

from collections.abc import Sequence


def is_media_range(value: str) -> bool:
    """``type/subtype`` where either may be ``*`` (``*/json`` is not a range)."""
    kind, slash, sub = value.partition("/")
    return bool(slash and kind and sub and "/" not in sub and not (kind == "*" and sub != "*"))


def accepts(ranges: Sequence[str], media_type: str) -> bool:
    kind, _, sub = media_type.lower().partition("/")
    for accepted in ranges:
        a_kind, _, a_sub = accepted.lower().partition("/")
        if a_kind in ("*", kind) and a_sub in ("*", sub):
            return True
    return False
