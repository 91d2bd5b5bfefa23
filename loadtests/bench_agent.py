"""Agent Service benchmark (issue 2): events per second, overhead per event, memory per active run.

    .venv/bin/python -m loadtests.bench_agent [--db sqlite|postgres] [--concurrency 50] ...

Starts, as real processes on loopback: the fake OpenAI-compatible model (200 tokens, no delay) and
the Agent Service pointed at it (``LLM_PROVIDER=openai``). Then:

1. one run at a time: events/s of a run as the client sees it, and the service's overhead per
   event (``agent_event_overhead_seconds``: model delta received -> SSE bytes written);
2. ``--concurrency`` runs at once, ``--rounds`` times: the same figures under load;
3. ``--cpu-runs N``: N paced runs at once, ``--cpu-rounds`` times: the service's CPU seconds (user +
   system, psutil) per 10,000 events the clients received; ``--profile FILE`` records a py-spy
   profile of the service meanwhile (raw collapsed stacks, readable as text);
   ``--tool-steps N``: each run first calls the calculator N times (a model turn each) before its
   answer, so the figures include the per-step work of a run (its checkpoints);
4. memory: a second Agent Service behind a slow model (each run streams for ~10 s) holds
   ``--memory-runs`` runs active at once; RSS after minus RSS before, divided by the run count.

``--speeds 50,500,2000 [--coalesce-ms 0,25]`` runs, instead of those phases, the cost per token
(``common.speed_matrix``): at each model speed, an Agent Service per ``STREAM_COALESCE_MS`` value and
the bare relay take turns streaming the same paced, stamped replies; per cell the CPU per 1,000
tokens delivered, the added latency per token (model stamp -> client) and the first token's.

Overhead percentiles come from the service's histogram (interpolated inside its buckets, like
PromQL's ``histogram_quantile``); event rates and durations from the client's own clock.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from loadtests.common import (
    AGENT_KEY,
    POSTGRES_ADMIN_URL,
    REPO_ROOT,
    add_speed_options,
    agent_process,
    databases,
    fake_llm,
    histogram_delta,
    machine,
    running,
    scrape,
    speed_matrix,
    summarize_seconds,
    verdict,
    work_dir,
    write_results,
)
from loadtests.memory_regions import resident_by_region
from shared.sse import SSEDecoder

OVERHEAD = "agent_event_overhead_seconds"
BATCHES = "agent_event_log_batch_size"
BODY = {"profile_name": "default", "message": "Tell me something.",
        "user_context": {"user_id": "bench", "org_id": "bench", "permissions": []}}


@dataclass
class RunResult:
    events: int
    answer_chunks: int
    terminal: str | None
    started: float
    first_event: float | None
    ended: float

    @property
    def duration(self) -> float:
        return self.ended - self.started

    @property
    def events_per_second(self) -> float:
        return self.events / self.duration if self.duration > 0 else 0.0


async def execute(
    client: httpx.AsyncClient, base_url: str, *, on_chunk: asyncio.Event | None = None,
) -> RunResult:
    """One run through ``POST /api/v1/agent/execute``, read to its terminal event."""
    decoder = SSEDecoder()
    events = chunks = 0
    terminal = None
    first = None
    started = time.perf_counter()
    async with client.stream("POST", f"{base_url}/api/v1/agent/execute", json=BODY,
                             headers={"X-API-Key": AGENT_KEY}) as response:
        if response.status_code != 200:
            body = await response.aread()
            raise RuntimeError(f"execute answered {response.status_code}: {body[:300]!r}")
        async for raw in response.aiter_bytes():
            for event in decoder.feed(raw):
                events += 1
                if first is None:
                    first = time.perf_counter()
                if event.event == "ANSWER_CHUNK":
                    chunks += 1
                    if on_chunk is not None:
                        on_chunk.set()
                elif event.event in ("COMPLETE", "ERROR", "ASK_USER"):
                    terminal = event.event
    return RunResult(events, chunks, terminal, started, first, time.perf_counter())


def _check(results: list[RunResult]) -> None:
    bad = [r.terminal for r in results if r.terminal != "COMPLETE"]
    if bad:
        raise RuntimeError(f"{len(bad)} runs did not complete: {bad[:5]}")


async def phase(client: httpx.AsyncClient, base_url: str, concurrency: int, rounds: int) -> dict[str, Any]:
    before = await scrape(client, base_url)
    results: list[RunResult] = []
    walls: list[float] = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        batch = await asyncio.gather(*(execute(client, base_url) for _ in range(concurrency)))
        walls.append(time.perf_counter() - t0)
        results.extend(batch)
    after = await scrape(client, base_url)
    _check(results)
    overhead = histogram_delta(before, after, OVERHEAD)
    total_events = sum(r.events for r in results)
    return {
        "concurrency": concurrency,
        "runs": len(results),
        "events_per_run": statistics.median(r.events for r in results),
        "events_per_second_per_run_median": round(statistics.median(r.events_per_second for r in results), 1),
        "events_per_second_aggregate": round(total_events / sum(walls), 1),
        "run_duration": summarize_seconds([r.duration for r in results]),
        "time_to_first_event": summarize_seconds([r.first_event - r.started for r in results if r.first_event]),
        "overhead_per_event": overhead.summary(),
        "overhead_share_at_most_1ms": overhead.share_at_most(0.001),
    }


def _cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def _start_profiler(pid: int, out: Path) -> subprocess.Popen:
    py_spy = shutil.which("py-spy")
    if py_spy is None:
        raise RuntimeError("--profile needs py-spy on PATH")
    return subprocess.Popen(  # one child for the whole phase; stopped with SIGINT, which writes the file
        [py_spy, "record", "--pid", str(pid), "--format", "raw", "--output", str(out), "--rate", "200", "--nonblocking", "--gil"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


async def cpu_phase(
    client: httpx.AsyncClient, base_url: str, pid: int, runs: int, rounds: int, profile: Path | None,
) -> dict[str, Any]:
    """CPU seconds of the service process per 10,000 events its clients received."""
    profiler = _start_profiler(pid, profile) if profile is not None else None
    try:
        metrics_before = await scrape(client, base_url)
        cpu_before = _cpu_seconds(pid)
        t0 = time.perf_counter()
        results: list[RunResult] = []
        for _ in range(rounds):
            results.extend(await asyncio.gather(*(execute(client, base_url) for _ in range(runs))))
        wall = time.perf_counter() - t0
        cpu = _cpu_seconds(pid) - cpu_before
        batches = histogram_delta(metrics_before, await scrape(client, base_url), BATCHES)
    finally:
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)
            await asyncio.to_thread(profiler.wait, 30)
    _check(results)
    events = sum(r.events for r in results)
    return {
        "concurrency": runs, "runs": len(results), "events": events, "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 3), "cpu_s_per_10k_events": round(cpu / events * 10_000, 3),
        "cpu_ms_per_run": round(cpu / len(results) * 1000, 3),
        "cpu_share_of_one_core": round(cpu / wall, 3),
        # How the event log's group commit batched them (its histogram's count and sum).
        "group_commits": int(batches.count),
        "events_per_group_commit": round(batches.total / batches.count, 1) if batches.count else None,
        "run_duration": summarize_seconds([r.duration for r in results]),
    }


async def _sessions_opened(url: str) -> int | None:
    """Connections the server has accepted to the database of ``url`` so far (PostgreSQL's statistics;
    None on SQLite). Opening one costs the service milliseconds of CPU: a figure no noise moves."""
    if not url.startswith("postgresql"):
        return None
    import asyncpg

    admin = await asyncpg.connect(POSTGRES_ADMIN_URL)
    try:
        return await admin.fetchval(
            "SELECT sessions FROM pg_stat_database WHERE datname = $1", url.rsplit("/", 1)[1])
    finally:
        await admin.close()


def _gauge(text: str, name: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    raise KeyError(name)


async def _heap(client: httpx.AsyncClient, base_url: str) -> dict[str, Any]:
    """The service's traced Python heap (``--heap``: ``DEBUG_HEAP_PROFILE``), and what grew since the last call."""
    response = await client.get(f"{base_url}/debug/heap", params={"top": 12})
    response.raise_for_status()
    return response.json()


def _heap_growth(report: dict[str, Any], runs: int) -> list[dict[str, Any]]:
    return [{"site": g["site"], "kib_per_run": round(g["bytes_diff"] / runs / 1024, 2), "count_diff": g["count_diff"]}
            for g in report["growth"] or []]


async def memory_phase(
    client: httpx.AsyncClient, base_url: str, rss, runs: int, heap: bool = False, pid: int | None = None,
) -> dict[str, Any]:
    # Warm the process first (imports, pools, caches): the baseline then holds what every run reuses.
    await asyncio.gather(*(execute(client, base_url) for _ in range(min(10, runs))))
    # Twice: the first round's recalls find no memories, the second's find the first's, and only
    # then does the process count a memory's tokens: that pages in 17 MiB of the tokenizer's library
    # (file-backed, shared, once per process), which the baseline must hold, not the runs measured.
    await asyncio.gather(*(execute(client, base_url) for _ in range(min(10, runs))))
    baseline = statistics.median([rss() for _ in range(5)])
    regions_before = resident_by_region(pid) if pid is not None else None
    heap_before = await _heap(client, base_url) if heap else None
    chunks = [asyncio.Event() for _ in range(runs)]
    tasks = [asyncio.create_task(execute(client, base_url, on_chunk=e)) for e in chunks]
    # Every run is streaming answer chunks: all of them are active now.
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in chunks)), 120)
    samples = []
    active_seen = []
    for _ in range(5):
        samples.append(rss())
        active_seen.append(_gauge((await client.get(f"{base_url}/metrics")).text, "agent_active_runs"))
        await asyncio.sleep(0.2)  # spacing between RSS samples, not synchronisation
    heap_active = await _heap(client, base_url) if heap else None
    regions_active = resident_by_region(pid) if pid is not None else None
    still_running = sum(not t.done() for t in tasks)
    results = await asyncio.gather(*tasks)
    _check(results)
    after_runs = rss()
    active = statistics.median(samples)
    figures: dict[str, Any] = {}
    if regions_before is not None and regions_active is not None:
        # Where the RSS per run lies (memory_regions): glibc's main heap, anonymous mappings, files.
        figures["rss_kib_per_active_run_by_region"] = {
            name: round((regions_active[name] - regions_before[name]) / runs, 1)
            for name in regions_before if name.endswith("_kib")}
    if heap_before is not None and heap_active is not None:
        heap_after = await _heap(client, base_url)
        figures["heap"] = {
            "traced_kib_per_active_run": round(
                (heap_active["traced_bytes"] - heap_before["traced_bytes"]) / runs / 1024, 1),
            "traced_kib_per_run_after_runs_ended": round(
                (heap_after["traced_bytes"] - heap_before["traced_bytes"]) / runs / 1024, 1),
            "growth_while_active": _heap_growth(heap_active, runs),
        }
    return figures | {
        "runs_held_active": runs,
        "runs_still_streaming_after_sampling": still_running,
        "agent_active_runs_gauge_while_sampling": active_seen,
        "rss_baseline_mib": round(baseline / 2**20, 2),
        "rss_active_mib": round(active / 2**20, 2),
        "rss_after_runs_ended_mib": round(after_runs / 2**20, 2),
        "rss_delta_per_active_run_kib": round((active - baseline) / runs / 1024, 1),
        "run_duration": summarize_seconds([r.duration for r in results]),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    if args.speeds:
        return {"benchmark": "agent_service_per_token", **await speed_matrix(args, "agent")}
    root = work_dir("bench-agent")
    results: dict[str, Any] = {
        "benchmark": "agent_service", "machine": machine(), "database": args.db,
        "settings": {"tokens": args.tokens, "ttft_ms": args.ttft_ms, "token_delay_ms": args.token_delay_ms,
                     "tool_steps": args.tool_steps,
                     "single_runs": args.single_runs, "concurrency": args.concurrency, "rounds": args.rounds,
                     "cpu_runs": args.cpu_runs, "cpu_rounds": args.cpu_rounds, "memory_runs": args.memory_runs,
                     "memory_token_delay_ms": args.memory_token_delay_ms, "log_level": args.log_level},
    }
    most = max(args.concurrency, args.memory_runs, args.cpu_runs)
    limits = httpx.Limits(max_connections=most + 10, max_keepalive_connections=20)
    async with databases(args.db, ["agent", "agent_mem"], root) as urls, \
            httpx.AsyncClient(timeout=httpx.Timeout(120.0), limits=limits) as client:
        llm = fake_llm(root, tokens=args.tokens, ttft_ms=args.ttft_ms, token_delay_ms=args.token_delay_ms,
                       tool_steps=args.tool_steps)
        agent = agent_process(root, llm, urls["agent"], args.log_level)
        async with running(llm, agent):
            await phase(client, agent.url, 1, args.warmup)
            if args.single_runs:
                results["single_run"] = phase_single = await phase(client, agent.url, 1, args.single_runs)
                _print("one run at a time", phase_single)
            if args.rounds:
                results["concurrent"] = phase_conc = await phase(client, agent.url, args.concurrency, args.rounds)
                _print(f"{args.concurrency} concurrent runs", phase_conc)
            if args.cpu_runs:
                sessions_before = await _sessions_opened(urls["agent"])
                results["cpu"] = cpu = await cpu_phase(
                    client, agent.url, agent.pid, args.cpu_runs, args.cpu_rounds, args.profile
                )
                if sessions_before is not None:
                    await asyncio.sleep(1.5)  # the server's statistics are flushed about once a second
                    cpu["database_connections_opened"] = await _sessions_opened(urls["agent"]) - sessions_before
                _print(f"CPU, {args.cpu_runs} concurrent runs", cpu)
        if args.memory_runs:
            slow = fake_llm(root, tokens=args.tokens, ttft_ms=0, token_delay_ms=args.memory_token_delay_ms,
                            name="fake_llm_slow")
            heap_env = {"DEBUG_HEAP_PROFILE": "1", "DEBUG_HEAP_PROFILE_FRAMES": "3"} if args.heap else None
            agent_mem = agent_process(root, slow, urls["agent_mem"], args.log_level, name="agent_service_mem",
                                      extra_env=heap_env)
            async with running(slow, agent_mem):
                results["memory"] = mem = await memory_phase(
                    client, agent_mem.url, agent_mem.rss, args.memory_runs, heap=args.heap, pid=agent_mem.pid)
            print(f"\n== memory, {args.memory_runs} active runs ==")
            for key, value in mem.items():
                print(f"  {key}: {value}")
    results["targets"] = {}
    if "concurrent" in results:
        p95 = results["concurrent"]["overhead_per_event"]["p95_ms"]
        results["targets"]["overhead_p95_at_concurrency_le_1ms"] = {"value_ms": p95, "verdict": verdict(p95, 1.0)}
    if "cpu" in results:
        per_10k = results["cpu"]["cpu_s_per_10k_events"]
        results["targets"]["cpu_per_10k_events_le_1s"] = {"value_s": per_10k, "verdict": verdict(per_10k, 1.0)}
    if "memory" in results:
        per_run = results["memory"]["rss_delta_per_active_run_kib"]
        results["targets"]["memory_per_active_run_le_256kib"] = {"value_kib": per_run, "verdict": verdict(per_run, 256)}
    print("\n== targets ==")
    for name, target in results["targets"].items():
        print(f"  {name}: {target}")
    results["logs"] = str(root)
    return results


def _print(title: str, figures: dict[str, Any]) -> None:
    print(f"\n== {title} ==")
    for key, value in figures.items():
        print(f"  {key}: {value}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--ttft-ms", type=float, default=None,
                        help="the model's time to first token (default 0, with --speeds 200)")
    parser.add_argument("--token-delay-ms", type=float, default=0.0,
                        help="pace of the model in phases 1 to 3 (the issue asks for 0: as fast as it can)")
    parser.add_argument("--tool-steps", type=int, default=0,
                        help="calculator calls (one model turn each) every run makes before its answer")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--single-runs", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cpu-runs", type=int, default=0, help="concurrent runs of the CPU phase; 0 skips it")
    parser.add_argument("--cpu-rounds", type=int, default=3)
    parser.add_argument("--profile", type=Path, default=None,
                        help="record a py-spy profile (raw collapsed stacks) of the service during the CPU phase")
    parser.add_argument("--memory-runs", type=int, default=100, help="0 skips the memory phase")
    parser.add_argument("--memory-token-delay-ms", type=float, default=50.0)
    parser.add_argument("--heap", action="store_true",
                        help="memory phase with tracemalloc on: the traced heap per active run and where it grew "
                             "(its RSS figures then include tracemalloc's own)")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--out", type=Path, default=None)
    add_speed_options(parser)
    args = parser.parse_args(argv)
    if args.ttft_ms is None:
        args.ttft_ms = 200.0 if args.speeds else 0.0
    if args.tool_steps < 0:
        parser.error("--tool-steps must not be negative")
    if args.out is None and args.speeds:
        args.out = REPO_ROOT / "loadtests" / "results" / f"bench_agent-{args.db}-speeds.json"
    if args.out is None:
        paced = f"-delay{args.token_delay_ms:g}ms" if args.token_delay_ms else ""
        args.out = REPO_ROOT / "loadtests" / "results" / f"bench_agent-{args.db}{paced}.json"
    return args


if __name__ == "__main__":
    arguments = parse_args()
    write_results(arguments.out, asyncio.run(main(arguments)))
