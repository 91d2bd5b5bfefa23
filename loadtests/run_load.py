"""The Locust load test with the whole product started around it, and memory sampled throughout.

    .venv/bin/python -m loadtests.run_load --run-time 10m [--users 50] [--db sqlite|postgres]

Starts the fake OpenAI-compatible model (fixed time to first token and pace per token), the Agent
Service and the ConversationService as processes on loopback, runs ``locust`` headless against the
ConversationService (``loadtests/locustfile.py``: 70% direct, 30% agent), samples the RSS of both
services every ``--sample-s`` seconds (and once a minute where it lies: ``memory_regions``), and
writes Locust's CSV statistics and a JSON summary (latency p50/p95/p99, error rate, throughput,
memory at start, middle and end).

``--heap-every MIN`` runs both services with ``DEBUG_HEAP_PROFILE=1`` (tracemalloc from start-up,
``--heap-frames`` frames per allocation) and reads ``GET /debug/heap`` every MIN minutes: the traced
total, the gc's object count and the sites that grew since the previous reading, to tell what holds
memory that grows. Tracing costs CPU and memory of its own, so such a run's latency and RSS are not
comparable with a run without it.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from loadtests.common import (
    JWT_SECRET,
    REPO_ROOT,
    machine,
    read_heaps,
    running_product,
    work_dir,
    write_results,
)
from loadtests.memory_regions import resident_by_region


def _read_stats(prefix: Path) -> list[dict[str, Any]]:
    rows = []
    with open(f"{prefix}_stats.csv", newline="") as f:
        for row in csv.DictReader(f):
            rows.append({
                "type": row["Type"], "name": row["Name"],
                "requests": int(row["Request Count"]), "failures": int(row["Failure Count"]),
                "error_rate": round(int(row["Failure Count"]) / int(row["Request Count"]), 5)
                if int(row["Request Count"]) else None,
                "p50_ms": _num(row["50%"]), "p95_ms": _num(row["95%"]), "p99_ms": _num(row["99%"]),
                "max_ms": _num(row["Max Response Time"]), "throughput_rps": _num(row["Requests/s"]),
            })
    return rows


def _read_failures(prefix: Path) -> list[dict[str, str]]:
    path = Path(f"{prefix}_failures.csv")
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return [{"name": r["Name"], "error": r["Error"], "occurrences": r["Occurrences"]} for r in csv.DictReader(f)]


def _num(value: str) -> float | None:
    try:
        return round(float(value), 2)
    except ValueError:
        return None


def _memory(samples: list[tuple[float, int]]) -> dict[str, Any]:
    if not samples:
        return {}
    mib = [(t, rss / 2**20) for t, rss in samples]
    # The first fifth is warm-up (pools fill, caches load); stability is judged on the rest.
    steady = mib[len(mib) // 5:] or mib
    n = len(steady)
    mean_t = sum(t for t, _ in steady) / n
    mean_m = sum(m for _, m in steady) / n
    var_t = sum((t - mean_t) ** 2 for t, _ in steady)
    slope = sum((t - mean_t) * (m - mean_m) for t, m in steady) / var_t if var_t else 0.0
    return {
        "start_mib": round(mib[0][1], 1), "after_warmup_mib": round(steady[0][1], 1),
        "middle_mib": round(mib[len(mib) // 2][1], 1), "end_mib": round(mib[-1][1], 1),
        "max_mib": round(max(m for _, m in mib), 1),
        "steady_slope_mib_per_min": round(slope * 60, 3), "samples": len(mib),
    }


async def _sample(procs: dict[str, Any], every: float, out: dict[str, list[tuple[float, int]]],
                  stop: asyncio.Event, regions: dict[str, list[dict[str, int] | None]]) -> None:
    t0 = time.monotonic()
    next_regions = 0.0
    while not stop.is_set():
        for name, proc in procs.items():
            out[name].append((time.monotonic() - t0, proc.rss()))
        if time.monotonic() - t0 >= next_regions:
            # Once a minute, where the RSS lies (memory_regions): a few ms of reading /proc.
            next_regions += 60.0
            for name, proc in procs.items():
                regions[name].append(resident_by_region(proc.pid))
        try:
            await asyncio.wait_for(stop.wait(), every)
        except TimeoutError:
            pass


async def _read_heaps(procs: dict[str, Any], every_min: float, out: list[dict[str, Any]],
                      stop: asyncio.Event) -> None:
    """Every ``every_min`` minutes, ``GET /debug/heap`` of each service (growth since the last read).
    A reading that fails is recorded as such: it must not cost the run its results."""
    t0 = time.monotonic()
    async with httpx.AsyncClient() as http:
        while True:
            try:
                await asyncio.wait_for(stop.wait(), every_min * 60)
                return
            except TimeoutError:
                pass
            minute = round((time.monotonic() - t0) / 60, 1)
            try:
                heaps = await read_heaps(http, procs, top=40)
            except httpx.HTTPError as exc:
                out.append({"minute": minute, "error": f"{type(exc).__name__}: {exc}"[:300]})
                print(f"  heap reading at minute {minute} failed: {type(exc).__name__}", flush=True)
                continue
            out.append({"minute": minute, **heaps})
            for name, heap in heaps.items():
                grew = sum(g["bytes_diff"] for g in heap["growth"] or [])
                print(f"  heap {name} minute {minute}: traced {heap['traced_bytes'] / 2**20:.2f} MiB, "
                      f"gc objects {heap['gc_objects']}, top-40 growth {grew / 1024:.0f} KiB", flush=True)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    root = work_dir("load")
    args.csv_dir.mkdir(parents=True, exist_ok=True)
    prefix = args.csv_dir / f"locust-{args.db}-{args.run_time}"
    results: dict[str, Any] = {
        "benchmark": "locust", "machine": machine(), "database": args.db,
        "settings": {"users": args.users, "spawn_rate": args.spawn_rate, "run_time": args.run_time,
                     "mix": "70% direct LLM / 30% agent", "ttft_ms": args.ttft_ms,
                     "token_delay_ms": args.token_delay_ms, "tokens": args.tokens, "log_level": args.log_level,
                     "workers": args.workers, "heap_every_min": args.heap_every,
                     "heap_frames": args.heap_frames},
    }
    if args.heap_every:
        # Inherited by both services' processes (see shared/heap_profile.py).
        os.environ["DEBUG_HEAP_PROFILE"] = "1"
        os.environ["DEBUG_HEAP_PROFILE_FRAMES"] = str(args.heap_frames)
    await _run(args, root, prefix, results)
    return results


async def _run(args: argparse.Namespace, root: Path, prefix: Path, results: dict[str, Any]) -> None:
    async with running_product(args, root, workers=args.workers) as product:
        agent, chat = product.agent, product.chat
        rss: dict[str, list[tuple[float, int]]] = {"agent_service": [], "conversation_service": []}
        regions: dict[str, list[dict[str, int] | None]] = {"agent_service": [], "conversation_service": []}
        stop = asyncio.Event()
        sampler = asyncio.create_task(
            _sample({"agent_service": agent, "conversation_service": chat}, args.sample_s, rss, stop, regions))
        heaps: list[dict[str, Any]] = []
        heap_reader = asyncio.create_task(_read_heaps(
            {"agent_service": agent, "conversation_service": chat}, args.heap_every, heaps, stop,
        )) if args.heap_every else None
        cmd = [sys.executable, "-m", "locust", "-f", str(REPO_ROOT / "loadtests" / "locustfile.py"),
               "--headless", "-u", str(args.users), "-r", str(args.spawn_rate), "--run-time", args.run_time,
               "--host", chat.url, "--csv", str(prefix), "--only-summary", "--stop-timeout", "60"]
        print("running:", " ".join(cmd), flush=True)
        started = time.monotonic()
        locust = await asyncio.create_subprocess_exec(
            *cmd, cwd=REPO_ROOT, env={**os.environ, "LOAD_JWT_SECRET": JWT_SECRET},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        output, _ = await locust.communicate()
        results["locust_exit_code"] = locust.returncode
        results["wall_seconds"] = round(time.monotonic() - started, 1)
        stop.set()
        await sampler
        if heap_reader is not None:
            await heap_reader
            results["heap"] = heaps
    (args.csv_dir / f"{prefix.name}.out.txt").write_text(output.decode(errors="replace"))
    results["stats"] = _read_stats(prefix)
    results["failures"] = _read_failures(prefix)
    results["memory"] = {name: _memory(samples) for name, samples in rss.items()}
    # The RSS curve itself, one point a minute, so "flat after warm-up" can be read, not only a slope.
    results["memory_per_minute_mib"] = {
        name: [round(rss_ / 2**20, 1) for t, rss_ in samples if int(t) % 60 < args.sample_s]
        for name, samples in rss.items()
    }
    # The same minutes by kind of mapping (main process only; with --workers, the parent's).
    results["memory_regions_per_minute_kib"] = regions
    print(output.decode(errors="replace")[-6000:])
    for row in results["stats"]:
        print(f"  {row['type']:5} {row['name']:34} n={row['requests']:6} err={row['error_rate']} "
              f"p50={row['p50_ms']} p95={row['p95_ms']} p99={row['p99_ms']} rps={row['throughput_rps']}")
    for name, mem in results["memory"].items():
        print(f"  memory {name}: {mem}")
    results["logs"] = str(root)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--workers", type=int, default=1, help="processes per service (> 1 uses Redis for chat)")
    parser.add_argument("--spawn-rate", type=float, default=10)
    parser.add_argument("--run-time", default="10m", help="Locust --run-time: 90s, 3m, 10m...")
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--ttft-ms", type=float, default=200.0)
    parser.add_argument("--token-delay-ms", type=float, default=5.0)
    parser.add_argument("--sample-s", type=float, default=5.0)
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--heap-every", type=float, default=0.0,
                        help="minutes between tracemalloc readings (0: no tracing)")
    parser.add_argument("--heap-frames", type=int, default=8, help="frames kept per traced allocation")
    parser.add_argument("--csv-dir", type=Path, default=REPO_ROOT / "loadtests" / "results")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = args.csv_dir / f"load-{args.db}-{args.run_time}.json"
    return args


if __name__ == "__main__":
    arguments = parse_args()
    write_results(arguments.out, asyncio.run(main(arguments)))
