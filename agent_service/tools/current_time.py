"""``current_time``: the current time in UTC or in a named IANA time zone."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timezone
from typing import Any, ClassVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agent_service.tools.base import Tool, ToolContext, ToolError

# IANA names are ASCII words joined by '/', e.g. America/Argentina/Buenos_Aires, Etc/GMT+3.
_ZONE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_+\-]*(?:/[A-Za-z0-9_+\-]+){0,2}$")
MAX_ZONE_CHARS = 64


def resolve_zone(name: str | None) -> ZoneInfo | timezone:
    if name is None or name.strip().upper() in ("", "UTC", "Z"):
        return UTC
    name = name.strip()
    if len(name) > MAX_ZONE_CHARS or not _ZONE_NAME.match(name) or ".." in name:
        raise ToolError(f"{name[:MAX_ZONE_CHARS]!r} is not an IANA time zone name such as Europe/Lisbon")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ToolError(f"unknown time zone {name!r}; use an IANA name such as Europe/Lisbon") from None


class CurrentTimeTool(Tool):
    name = "current_time"
    idempotent = True
    description = "The current date and time, in UTC or in an IANA time zone such as Europe/Lisbon."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "timezone": {
                "type": "string",
                "description": "IANA time zone name, e.g. Europe/Lisbon; UTC when omitted",
                "maxLength": MAX_ZONE_CHARS,
            }
        },
        "additionalProperties": False,
    }

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        # The clock is injectable so a test can pin "now"; it must return an aware datetime.
        self._clock = clock or (lambda: datetime.now(UTC))

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        zone_name = args.get("timezone")
        if zone_name is not None and not isinstance(zone_name, str):
            raise ToolError("'timezone' must be a string")
        zone = resolve_zone(zone_name)
        now = self._clock().astimezone(zone)
        return {
            "timezone": "UTC" if zone is UTC else str(zone),
            "iso": now.isoformat(timespec="seconds"),
            "date": now.date().isoformat(),
            "time": now.strftime("%H:%M:%S"),
            "weekday": now.strftime("%A"),
            "utc_offset": now.strftime("%z"),
        }
