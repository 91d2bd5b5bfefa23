"""The per-token benchmark's machinery on tiny cells, so that it keeps working: ``loadtests.bench_agent
--speeds`` run as a script, an Agent Service per coalescing value and the bare relay taking turns at
two model speeds. Every stamped token must reach the client and every cell must carry its figures;
the figures themselves are the benchmark's business, not this test's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from loadtests.common import REPO_ROOT


@pytest.mark.timeout(300)
def test_a_tiny_run_over_speeds_with_coalescing_off_and_on_and_the_relay(tmp_path) -> None:
    out = tmp_path / "speeds.json"
    done = subprocess.run(
        [sys.executable, "-m", "loadtests.bench_agent", "--db", "sqlite", "--speeds", "100,1000", "--stream-s", "0.1",
         "--load", "200", "--coalesce-ms", "0,25", "--cell-rounds", "2", "--ttft-ms", "0", "--log-level", "WARNING",
         "--out", str(out)],
        check=False, cwd=REPO_ROOT, capture_output=True, text=True, timeout=280,
    )
    assert done.returncode == 0 and out.exists(), done.stdout + done.stderr
    results = json.loads(out.read_text())
    cells = results["cells"]
    # 2 speeds x (off, on, relay) x 2 rounds; 100 tokens/s: 2 streams of 10 tokens, 1000: 1 of 100.
    assert len(cells) == 12
    for row in cells:
        assert row["errors"] == 0 and row["completed"] == row["streams"], row
        assert row["tokens"] == row["streams"] * row["tokens_per_stream"], row
        assert row["model_tokens_per_s"]["min"] > 0 and row["latency_ms"]["p95"] >= row["latency_ms"]["p50"] >= 0
        service = "floor_relay" if row["cell"] == "floor" else "agent_service"
        assert set(row["cpu_ms_per_1k_tokens"]) == {service, "fake_model", "client"}
    assert {(r["speed"], r["tokens_per_stream"], r["streams"]) for r in cells} == {(100, 10, 2), (1000, 100, 1)}
    assert set(results["summary"]) == {"100", "1000"}
    assert set(results["summary"]["1000"]) == {"agent/c0", "agent/c25", "floor"}
    assert all(t["verdict"] in ("MET", "MISSED") for t in results["targets"].values()) and results["targets"]
