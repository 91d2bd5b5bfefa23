"""Burst start and fresh-process memory: a fresh Agent Service (one process), levels of paced streams
started at once; per level each stream's first answer and each token's latency, and the process's RSS
idle and at its peak while the level streamed.

    .venv/bin/python -m loadtests.burst_start [--levels 50,100] [--db sqlite|postgres] [--ttft-ms 0]
        [--code DIR] [--set KEY=VALUE ...] [--label NAME] [--out FILE] [--append]

Starts, as real processes on loopback, the fake model (200 tokens at 20 ms; each token's text is the
time it was sent) and the Agent Service on a fresh database, then runs each level like
``bench_capacity`` (``capacity_client``, two client processes). Every stream acts for the same user,
so from the second level on each run's memory recall finds the turns the level before wrote, as in a
capacity sweep: the first level is a fresh process's first burst, with nothing to recall; the next
ones recall. The first answer is the time from a stream's request to its first ANSWER_CHUNK: the
start of a burst (admission, the run's statements, the recall) shows there, before the per-token
latency (model send stamp to client arrival) can see it. RSS is sampled every 50 ms.

``--code DIR`` runs the Agent Service of another checkout (its ``agent_service`` and migrations, this
virtualenv) under the same harness, client and fake model: two commits measured alternating in the
same minutes differ only by the service's code.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from loadtests.bench_capacity import parse_levels
from loadtests.capacity_client import Clients, LevelSpec, split
from loadtests.common import (
    AGENT_KEY,
    REPO_ROOT,
    Process,
    agent_process,
    databases,
    fake_llm,
    machine,
    run_streams,
    running,
    settle,
    work_dir,
    write_results,
)

RSS_SAMPLE_S = 0.05


@dataclass
class CheckoutProcess(Process):
    """A ``Process`` run from another checkout's tree (its packages first on the path)."""

    code: Path = REPO_ROOT

    def _spawn(self) -> None:
        with open(self.log_path, "wb") as log:
            self.popen = subprocess.Popen(
                [sys.executable, *self.argv, "--host", "127.0.0.1", "--port", str(self.port)],
                env={**os.environ, **self.env, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(self.code)},
                cwd=self.code, stdout=log, stderr=subprocess.STDOUT,
            )


def mib(n: int) -> float:
    return round(n / 2**20, 1)


async def peak_rss(pid: int, peak: list[int], stop: asyncio.Event) -> None:
    process = psutil.Process(pid)
    while not stop.is_set():
        peak[0] = max(peak[0], process.memory_info().rss)
        await asyncio.sleep(RSS_SAMPLE_S)  # sampling another process's RSS; nothing to wait on


async def main(args: argparse.Namespace) -> dict[str, Any]:
    root = work_dir("burst-start")
    results: dict[str, Any] = {
        "benchmark": "burst_start", "label": args.label, "code": str(args.code), "machine": machine(),
        "settings": {k: str(v) for k, v in vars(args).items() if k not in ("out", "label")},
        "load_average_before": [round(x, 2) for x in os.getloadavg()], "levels": [],
    }
    clients = Clients(args.clients)
    try:
        async with databases(args.db, ["agent"], root) as urls:
            llm = fake_llm(root, tokens=args.tokens, ttft_ms=args.ttft_ms, token_delay_ms=args.token_delay_ms, stamp=True)
            settings = {"LLM_MAX_CONNECTIONS": str(max(*args.levels, 100)), **dict(p.split("=", 1) for p in args.set)}
            base = agent_process(root, llm, urls["agent"], args.log_level, extra_env=settings)
            agent = CheckoutProcess(base.name, base.argv, base.env, base.log_dir, code=args.code)
            async with running(llm, agent), httpx.AsyncClient(timeout=30) as http:
                await asyncio.sleep(args.settle_s)  # start-up's background work done before the idle reading
                results["rss_idle_mib"] = mib(psutil.Process(agent.pid).memory_info().rss)
                for n in args.levels:
                    peak, stop = [0], asyncio.Event()
                    sampler = asyncio.create_task(peak_rss(agent.pid, peak, stop))
                    timeout = args.ttft_ms / 1000 + args.tokens * args.token_delay_ms / 1000 + args.stream_timeout_s
                    specs = [LevelSpec(target="agent", streams=k, tokens=args.tokens, timeout_s=timeout,
                                       agent_url=agent.url, agent_key=AGENT_KEY, name=f"agent{n}-{i}")
                             for i, k in enumerate(split(n, len(clients.procs)))]
                    row = {"streams": n, **await run_streams(clients, specs, {"agent_service": agent, "fake_model": llm})}
                    p95 = row["latency_ms"]["p95"]
                    row["passed"] = row["errors"] == 0 and p95 is not None and p95 < args.p95_limit_ms
                    stop.set()
                    await sampler
                    row["rss_peak_mib"] = mib(peak[0])
                    results["levels"].append(row)
                    print(f"{n:4} streams: first answer p50 {row['first_answer_ms']['p50']} p95 "
                          f"{row['first_answer_ms']['p95']} ms, per token p95 {row['latency_ms']['p95']} p99 "
                          f"{row['latency_ms']['p99']} ms, errors {row['errors']}, RSS idle {results['rss_idle_mib']} "
                          f"peak {row['rss_peak_mib']} MiB, load {row['load_average_1m_after']}", flush=True)
                    await settle(http, agent, args.settle_s)
    finally:
        clients.close()
    results["logs"] = str(root)
    return results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--levels", type=parse_levels, default=parse_levels("50,100"))
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--ttft-ms", type=float, default=0.0)
    parser.add_argument("--token-delay-ms", type=float, default=20.0)
    parser.add_argument("--p95-limit-ms", type=float, default=50.0)
    parser.add_argument("--stream-timeout-s", type=float, default=60.0)
    parser.add_argument("--settle-s", type=float, default=3.0)
    parser.add_argument("--code", type=Path, default=REPO_ROOT, help="the checkout whose Agent Service is measured")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an Agent Service setting")
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("--label", default="")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "loadtests" / "results" / "burst_start.json")
    parser.add_argument("--append", action="store_true", help="add this run to --out's runs")
    args = parser.parse_args(argv)
    if any("=" not in pair for pair in args.set):
        parser.error("--set takes KEY=VALUE")
    args.code = args.code.resolve()
    return args


if __name__ == "__main__":
    arguments = parse_args()
    outcome = asyncio.run(main(arguments))
    runs = json.loads(arguments.out.read_text()).get("runs", []) if arguments.append and arguments.out.exists() else []
    write_results(arguments.out, {"runs": [*runs, outcome]})
