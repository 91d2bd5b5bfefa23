"""The Agent Service benchmark's machinery on a tiny level, so that it keeps working: ``loadtests.bench_agent``
run as a script with its CPU phase only (the per-run figure a change to a run's work is judged by), each run
taking two tool steps before its answer. Every run must complete, and the figures must be there."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from loadtests.common import REPO_ROOT


@pytest.mark.timeout(240)
def test_a_tiny_cpu_phase_with_tool_steps_reports_cpu_per_run(tmp_path) -> None:
    out = tmp_path / "bench_agent.json"
    done = subprocess.run(
        [sys.executable, "-m", "loadtests.bench_agent", "--db", "sqlite", "--tokens", "2", "--warmup", "1",
         "--single-runs", "0", "--rounds", "0", "--memory-runs", "0", "--cpu-runs", "2", "--cpu-rounds", "1",
         "--tool-steps", "2", "--log-level", "WARNING", "--out", str(out)],
        check=False, cwd=REPO_ROOT, capture_output=True, text=True, timeout=220,
    )
    assert done.returncode == 0 and out.exists(), done.stdout + done.stderr
    results = json.loads(out.read_text())
    assert results["settings"]["tool_steps"] == 2
    cpu = results["cpu"]
    assert cpu["runs"] == 2 and cpu["cpu_ms_per_run"] > 0, cpu
    # Each run: two calculator steps (TOOL_START and TOOL_END each), two answer chunks and COMPLETE.
    assert cpu["events"] >= 2 * 7, cpu
