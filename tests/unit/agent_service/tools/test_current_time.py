"""current_time: UTC by default, IANA zones validated with zoneinfo."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agent_service.tools.base import ToolContext, ToolError
from agent_service.tools.current_time import CurrentTimeTool
from shared.protocol import UserContext

CTX = ToolContext(session_id="s", run_id="r", user_context=UserContext(user_id="u"))
FIXED = datetime(2026, 7, 1, 12, 30, 5, tzinfo=UTC)


async def test_utc_by_default() -> None:
    result = await CurrentTimeTool(clock=lambda: FIXED).run({}, CTX)
    assert result == {"timezone": "UTC", "iso": "2026-07-01T12:30:05+00:00", "date": "2026-07-01",
                      "time": "12:30:05", "weekday": "Wednesday", "utc_offset": "+0000"}


async def test_named_zone_with_daylight_saving() -> None:
    result = await CurrentTimeTool(clock=lambda: FIXED).run({"timezone": "Europe/Lisbon"}, CTX)
    assert result["timezone"] == "Europe/Lisbon"
    assert result["iso"] == "2026-07-01T13:30:05+01:00"
    result = await CurrentTimeTool(clock=lambda: FIXED).run({"timezone": "America/Argentina/Buenos_Aires"}, CTX)
    assert result["time"] == "09:30:05"


async def test_the_real_clock_is_close_to_now() -> None:
    result = await CurrentTimeTool().run({"timezone": "UTC"}, CTX)
    assert abs(datetime.fromisoformat(result["iso"]) - datetime.now(UTC)) < timedelta(seconds=5)


@pytest.mark.parametrize(
    "zone", ["Mars/Olympus_Mons", "../../etc/passwd", "Europe/Lisbon; rm -rf", "x" * 100, "/etc/localtime"]
)
async def test_invalid_zones_are_refused(zone: str) -> None:
    with pytest.raises(ToolError, match="time zone"):
        await CurrentTimeTool().run({"timezone": zone}, CTX)


async def test_non_string_zone_is_refused() -> None:
    with pytest.raises(ToolError, match="must be a string"):
        await CurrentTimeTool().run({"timezone": 5}, CTX)
