"""The history-length benchmark's machinery on a tiny run, so that it keeps working: the seeded
conversation, the turns through the real services, the figures."""

from __future__ import annotations

from loadtests.bench_history import main, parse_args


async def test_a_tiny_run_reports_each_length(tmp_path) -> None:
    args = parse_args(["--lengths", "0,40", "--turns", "2", "--tokens", "3", "--out", str(tmp_path / "h.json")])
    results = await main(args)
    for length in ("0", "40"):
        row = results["lengths"][length]
        assert row["turns"] == 2 and row["failed_turns"] == 0 and row["cpu_ms_per_turn"] > 0
        assert row["rss_peak_mib"] >= max(row["rss_before_mib"], row["rss_after_mib"]) > 0
