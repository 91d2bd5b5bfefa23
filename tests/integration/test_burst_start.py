"""``loadtests.burst_start`` run as a script, small: a fresh Agent Service, two levels of paced streams,
the second recalling the first's turns. Every stream is answered, both levels report their first
answers, per-token latencies and the RSS sampled while they streamed, and ``--code`` runs the service
of the checkout it names (here this one)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from loadtests.common import REPO_ROOT


@pytest.mark.timeout(300)
def test_two_small_levels_report_first_answers_latencies_and_rss(tmp_path) -> None:
    out = tmp_path / "burst-start.json"
    done = subprocess.run(
        [sys.executable, "-m", "loadtests.burst_start", "--levels", "3,4", "--tokens", "5", "--token-delay-ms", "5",
         "--settle-s", "0.5", "--code", str(REPO_ROOT), "--label", "test", "--out", str(out)],
        check=False, cwd=REPO_ROOT, capture_output=True, text=True, timeout=280,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [run] = json.loads(out.read_text())["runs"]
    assert run["code"] == str(REPO_ROOT) and run["label"] == "test"
    assert [level["streams"] for level in run["levels"]] == [3, 4]
    for level in run["levels"]:
        assert level["completed"] == level["streams"] and level["errors"] == 0, level
        assert level["tokens"] == level["streams"] * 5, level
        assert level["first_answer_ms"]["p50"] > 0 and level["latency_ms"]["p95"] is not None, level
        assert level["rss_peak_mib"] >= run["rss_idle_mib"] > 0, level
