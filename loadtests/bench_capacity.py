"""Capacity: the most concurrent paced streams with per-event p95 under 50 ms and no errors, and the
server CPU per 10,000 streamed events.

    .venv/bin/python -m loadtests.bench_capacity [--target agent|chat|both|floor] [--db sqlite|postgres]
        [--workers N] [--levels 25,50,100,150,200,250,300,400,500] [--all-levels] [--clients K]

Starts, as real processes on loopback: the fake model paced like a hosted one (200 tokens, 200 ms
to the first, 20 ms each; every token's text is the time the model sent it), the Agent Service
and, for ``--target chat``, the ConversationService. At each level, N streams start at once, each a
whole run:

- ``agent``: ``POST /api/v1/agent/execute``, its SSE read to the end; every event counts, the
  ANSWER_CHUNK events give the latencies;
- ``chat``: a conversation each, its WebSocket open, then an ``/agent`` message; every frame
  counts, the ``message.delta`` frames give the latencies (model -> Agent Service ->
  ConversationService -> browser's socket);
- ``floor``: the same streams as ``agent`` through ``loadtests.floor_relay`` instead of the Agent
  Service (model stream in, one SSE event out per token, nothing else; ``--workers`` processes):
  the most this machine can relay at that pace with the model and the client beside it, the
  ceiling over the services' figures.

A token's latency is when the client read it minus when the model sent it (one host, one clock).
A level passes with no errors and a p95 under ``--p95-limit-ms``; the capacity is the largest
passing level, and the sweep stops at the first failing one unless ``--all-levels``. CPU is user +
system time of each process and its children (workers) over the level, per 10,000 events (chat:
frames) delivered; the client's and the fake model's own CPU say whether the load generator was
the limit. The client is ``loadtests.capacity_client`` in ``--clients`` processes.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from loadtests.capacity_client import LevelSpec, Share, worker
from loadtests.common import (
    AGENT_KEY,
    JWT_SECRET,
    REPO_ROOT,
    Process,
    fake_llm,
    machine,
    percentile,
    running,
    running_product,
    tree_cpu_seconds,
    work_dir,
    write_results,
)

DEFAULT_LEVELS = "25,50,100,150,200,250,300,400,500"


class Clients:
    """``count`` client processes, kept for the whole sweep; a level's streams are split over them."""

    def __init__(self, count: int) -> None:
        ctx = multiprocessing.get_context("spawn")  # a clean interpreter: no inherited event loop
        self.pipes = []
        self.procs = []
        for _ in range(count):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=worker, args=(child,), daemon=True)
            proc.start()
            self.pipes.append(parent)
            self.procs.append(proc)

    def cpu_seconds(self) -> float:
        return sum(tree_cpu_seconds(p.pid) for p in self.procs)

    async def _recv(self, pipe) -> Any:
        answer = await asyncio.to_thread(pipe.recv)
        if isinstance(answer, tuple) and answer[0] == "failed":
            raise RuntimeError(f"a client process failed: {answer[1]}")
        return answer

    async def run(self, specs: list[LevelSpec], between) -> Share:
        """Send each process its spec, wait until all are set up, call ``between("go")``, start them
        all, collect and merge their shares."""
        used = [(pipe, spec) for pipe, spec in zip(self.pipes, specs, strict=True) if spec.streams]
        for pipe, spec in used:
            pipe.send(spec)
        answers = await asyncio.gather(*(self._recv(pipe) for pipe, _ in used), return_exceptions=True)
        failures = [a for a in answers if isinstance(a, BaseException)]
        if failures:
            for (pipe, _), answer in zip(used, answers, strict=True):
                if not isinstance(answer, BaseException):
                    pipe.send("abort")  # its run_level raises on anything but "go"
                    await asyncio.to_thread(pipe.recv)
            raise failures[0]
        between()
        for pipe, _ in used:
            pipe.send("go")
        merged = Share()
        for share in await asyncio.gather(*(self._recv(pipe) for pipe, _ in used)):
            merged.merge(share)
        return merged

    def close(self) -> None:
        for pipe in self.pipes:
            pipe.send(None)
        for proc in self.procs:
            proc.join(10)


def split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


async def gauge_sum(http: httpx.AsyncClient, url: str, name: str) -> float:
    text = (await http.get(f"{url}/metrics")).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


async def settle(http: httpx.AsyncClient, agent: Process | None, seconds: float) -> None:
    """Wait until the Agent Service (if any) runs nothing, then leave every process ``seconds`` to
    finish its background work (batched writes, closing sockets) before the next level."""
    deadline = time.monotonic() + 60
    while (agent is not None and await gauge_sum(http, agent.url, "agent_active_runs") > 0
           and time.monotonic() < deadline):
        await asyncio.sleep(0.2)  # polling another process's state; there is nothing to wait on
    await asyncio.sleep(seconds)  # quiet time between levels, the point of settling


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


async def level(
    args: argparse.Namespace, target: str, n: int, clients: Clients, procs: dict[str, Process], urls: dict[str, str],
) -> dict[str, Any]:
    timeout = args.ttft_ms / 1000 + args.tokens * args.token_delay_ms / 1000 + args.stream_timeout_s
    # The floor relay answers the Agent Service's execute request with the same kind of SSE stream.
    client_kind = "agent" if target == "floor" else target
    specs = [LevelSpec(target=client_kind, streams=k, tokens=args.tokens, timeout_s=timeout, agent_url=urls["agent"],
                       agent_key=AGENT_KEY, chat_url=urls.get("chat", ""), jwt_secret=JWT_SECRET,
                       name=f"{target}{n}-{i}")
             for i, k in enumerate(split(n, len(clients.procs)))]
    cpu_before: dict[str, float] = {}
    started = 0.0

    def go() -> None:
        nonlocal started
        cpu_before.update({name: tree_cpu_seconds(p.pid) for name, p in procs.items()}, client=clients.cpu_seconds())
        started = time.perf_counter()

    share = await clients.run(specs, go)
    wall = time.perf_counter() - started
    cpu = {name: tree_cpu_seconds(p.pid) - cpu_before[name] for name, p in procs.items()}
    cpu["client"] = clients.cpu_seconds() - cpu_before["client"]
    lat = list(share.latencies)
    first = list(share.first_answer)
    errors = sum(share.errors.values())
    p95 = ms(percentile(lat, 0.95)) if lat else None
    per10k = {name: round(s / share.events * 10_000, 3) if share.events else None for name, s in cpu.items()}
    return {
        "streams": n, "completed": share.completed, "errors": errors, "error_reasons": dict(share.errors),
        "events": share.events, "tokens_timed": len(lat), "wall_s": round(wall, 2),
        "events_per_s": round(share.events / wall, 1) if wall else None,
        "latency_ms": {"p50": ms(percentile(lat, 0.5)) if lat else None, "p95": p95,
                       "p99": ms(percentile(lat, 0.99)) if lat else None, "max": ms(max(lat)) if lat else None},
        "first_answer_ms": {"p50": ms(percentile(first, 0.5)) if first else None,
                            "p95": ms(percentile(first, 0.95)) if first else None},
        "cpu_s": {k: round(v, 3) for k, v in cpu.items()},
        "cpu_s_per_10k_events": per10k,
        # Cores each process kept busy; the load average says how much else the host was running.
        "cpu_cores": {k: round(v / wall, 2) if wall else None for k, v in cpu.items()},
        "load_average_1m_after": round(os.getloadavg()[0], 2),
        "passed": errors == 0 and p95 is not None and p95 < args.p95_limit_ms,
    }


def print_row(target: str, row: dict[str, Any]) -> None:
    lat, first, per10k = row["latency_ms"], row["first_answer_ms"], row["cpu_s_per_10k_events"]
    cpu = "  ".join(f"{k} {v}" for k, v in per10k.items())
    print(f"{target:5} {row['streams']:5} {'PASS' if row['passed'] else 'FAIL':4} {row['errors']:6} "
          f"{row['events']:8} {row['events_per_s'] or 0:9.0f} {lat['p50'] or 0:8.1f} {lat['p95'] or 0:8.1f} "
          f"{lat['p99'] or 0:8.1f} {lat['max'] or 0:8.1f} {first['p50'] or 0:8.1f} {first['p95'] or 0:8.1f}  {cpu}",
          flush=True)
    if row["error_reasons"]:
        print(f"      errors: {row['error_reasons']}", flush=True)


HEADER = (f"{'tgt':5} {'N':>5} {'ok?':4} {'errors':>6} {'events':>8} {'events/s':>9} {'p50':>8} {'p95':>8} "
          f"{'p99':>8} {'max':>8} {'1st p50':>8} {'1st p95':>8}  CPU-s per 10k events (chat: frames)")


async def sweep(
    args: argparse.Namespace, target: str, clients: Clients, procs: dict[str, Process], urls: dict[str, str],
    http: httpx.AsyncClient,
) -> dict[str, Any]:
    rows = []
    for n in args.levels:
        row = await level(args, target, n, clients, procs, urls)
        rows.append(row)
        print_row(target, row)
        await settle(http, procs.get("agent_service"), args.settle_s)
        if not row["passed"] and not args.all_levels:
            break
    passing = [r["streams"] for r in rows if r["passed"]]
    return {"levels": rows, "capacity_streams": max(passing) if passing else 0}


@asynccontextmanager
async def servers(args: argparse.Namespace, root: Path, targets: list[str], results: dict[str, Any]):
    """The processes under measure, as ``(procs, urls)``: the product, or for ``floor`` the fake
    model and the bare relay (no service, no database)."""
    if targets == ["floor"]:
        llm = fake_llm(root, tokens=args.tokens, ttft_ms=args.ttft_ms, token_delay_ms=args.token_delay_ms,
                       stamp=True)
        relay = Process("floor_relay", ["-m", "loadtests.floor_relay", "--model", llm.url,
                                        "--workers", str(args.workers)], {}, root)
        async with running(llm, relay):
            yield {"floor_relay": relay, "fake_model": llm}, {"agent": relay.url}
        return
    # Every stream of the largest level calls the model at once (at the default limit, 100, the
    # others would wait for a connection before their first token).
    model_calls = {"LLM_MAX_CONNECTIONS": str(max(*args.levels, 100))}
    async with running_product(args, root, chat="chat" in targets, workers=args.workers, stamp=True,
                               agent_env=model_calls) as product:
        if product.redis_url is not None:
            results["settings"]["redis_url"] = product.redis_url
        procs = {"agent_service": product.agent}
        urls = {"agent": product.agent.url}
        if product.chat is not None:
            procs["conversation_service"] = product.chat
            urls["chat"] = product.chat.url
        procs["fake_model"] = product.llm
        yield procs, urls


async def main(args: argparse.Namespace) -> dict[str, Any]:
    root = work_dir("bench-capacity")
    targets = ["agent", "chat"] if args.target == "both" else [args.target]
    results: dict[str, Any] = {
        "benchmark": "capacity", "machine": machine(), "database": None if args.target == "floor" else args.db,
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
    }
    clients = Clients(args.clients)
    try:
        async with servers(args, root, targets, results) as (procs, urls), httpx.AsyncClient(timeout=30) as http:
            print(HEADER, flush=True)
            for target in targets:
                results[target] = await sweep(args, target, clients, procs, urls, http)
    finally:
        clients.close()
    print()
    for target in targets:
        print(f"capacity ({target}): {results[target]['capacity_streams']} concurrent streams "
              f"(p95 < {args.p95_limit_ms:g} ms, no errors)")
    results["logs"] = str(root)
    return results


def parse_levels(text: str) -> list[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"levels are whole numbers separated by commas: {text!r}") from None
    if not levels or any(n < 1 for n in levels):
        raise argparse.ArgumentTypeError("levels must be positive")
    return levels


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--target", choices=["agent", "chat", "both", "floor"], default="agent",
                        help="both: the agent sweep, then the chat sweep, on the same processes; floor: the bare "
                             "relay instead of the services")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--workers", type=int, default=1,
                        help="passed to each service as --workers N when N > 1 (chat then uses Redis)")
    parser.add_argument("--levels", type=parse_levels, default=parse_levels(DEFAULT_LEVELS))
    parser.add_argument("--all-levels", action="store_true", help="go on after a failing level")
    parser.add_argument("--clients", type=int, default=2, help="client processes the streams are spread over")
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--ttft-ms", type=float, default=200.0)
    parser.add_argument("--token-delay-ms", type=float, default=20.0)
    parser.add_argument("--p95-limit-ms", type=float, default=50.0)
    parser.add_argument("--settle-s", type=float, default=3.0, help="quiet time between levels")
    parser.add_argument("--stream-timeout-s", type=float, default=60.0,
                        help="how long a stream may take beyond its paced length before it counts as an error")
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.workers < 1 or args.clients < 1 or args.tokens < 1:
        parser.error("--workers, --clients and --tokens must be at least 1")
    if args.ttft_ms < 0 or args.token_delay_ms <= 0 or args.settle_s < 0:
        parser.error("--ttft-ms and --settle-s must not be negative, --token-delay-ms must be positive")
    if args.out is None:
        workers = f"-w{args.workers}" if args.workers > 1 else ""
        args.out = REPO_ROOT / "loadtests" / "results" / f"bench_capacity-{args.target}-{args.db}{workers}.json"
    return args


if __name__ == "__main__":
    arguments = parse_args()
    write_results(arguments.out, asyncio.run(main(arguments)))
