"""Capacity: the most concurrent paced streams with per-token p95 under 50 ms and no errors, and the
server CPU per 1,000 tokens delivered.

    .venv/bin/python -m loadtests.bench_capacity [--target agent|chat|both|floor] [--db sqlite|postgres]
        [--workers N] [--levels 25,50,100,150,200,250,300,400,500] [--all-levels] [--clients K]
        [--speeds 50,500,2000 --stream-s 4] [--coalesce-ms 0,25] [--with-floor] [--set KEY=VALUE ...]

Starts, as real processes on loopback: the fake model paced like a hosted one (200 tokens, 200 ms
to the first, 20 ms each, or each of ``--speeds`` in tokens/s for ``--stream-s`` seconds; every
token's text is the time the model sent it), the Agent Service and, for ``--target chat``, the
ConversationService; with ``--coalesce-ms`` one of each per ``STREAM_COALESCE_MS`` value, all
running together. At each level, N streams start at once, each a whole run:

- ``agent``: ``POST /api/v1/agent/execute``, its SSE read to the end; every event counts, the
  ANSWER_CHUNK events give the latencies;
- ``chat``: a conversation each, its WebSocket open, then an ``/agent`` message; every frame
  counts, the ``message.delta`` frames give the latencies (model -> Agent Service ->
  ConversationService -> browser's socket);
- ``floor`` (or beside the services, ``--with-floor``): the same streams as ``agent`` through
  ``loadtests.floor_relay`` instead of the Agent Service (model stream in, one SSE event out per
  token, nothing else; ``--workers`` processes): the most this machine can relay at that pace with
  the model and the client beside it, the ceiling over the services' figures.

Several cells (coalescing values, the relay) take turns at each level, their order reversed every
other level, so that they share the machine's minutes. A token's latency is when the client read it
minus when the model sent it (one host, one clock), a coalescing budget included. A level passes
with no errors and a p95 under ``--p95-limit-ms``; a cell's capacity is its largest passing level,
and its sweep stops at its first failing one unless ``--all-levels``. CPU is user + system time of
each process and its children (workers) over the level, per 1,000 tokens delivered; the client's and
the fake model's own CPU say whether the load generator was the limit. The client is
``loadtests.capacity_client`` in ``--clients`` processes.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

import httpx

from loadtests.capacity_client import Clients
from loadtests.common import (
    REPO_ROOT,
    Cell,
    Pace,
    Rig,
    comma_list,
    level_specs,
    machine,
    number_list,
    run_streams,
    running_rig,
    set_pace,
    settle,
    speed_paces,
    work_dir,
    write_results,
)

DEFAULT_LEVELS = "25,50,100,150,200,250,300,400,500"


async def level(args: argparse.Namespace, cell: Cell, pace: Pace, n: int, clients: Clients, rig: Rig) -> dict[str, Any]:
    specs = level_specs(cell, rig, pace, n, len(clients.procs), f"{cell.name}{n}-{pace.speed:g}",
                        args.stream_timeout_s)
    row = {"streams": n, **await run_streams(clients, specs, rig.procs(cell))}
    p95 = row["latency_ms"]["p95"]
    return row | {"passed": row["errors"] == 0 and p95 is not None and p95 < args.p95_limit_ms}


def print_row(name: str, row: dict[str, Any]) -> None:
    lat, first, rate = row["latency_ms"], row["first_answer_ms"], row["model_tokens_per_s"] or {}
    cpu = "  ".join(f"{k} {v}" for k, v in row["cpu_ms_per_1k_tokens"].items())
    print(f"{name:14} {row['streams']:5} {'PASS' if row['passed'] else 'FAIL':4} {row['errors']:6} "
          f"{row['tokens']:8} {row['events_per_1k_tokens'] or 0:6.0f} {rate.get('p50') or 0:7.0f} "
          f"{lat['p50'] or 0:8.1f} {lat['p95'] or 0:8.1f} {lat['p99'] or 0:8.1f} {lat['max'] or 0:8.1f} "
          f"{first['p50'] or 0:8.1f} {first['p95'] or 0:8.1f}  {cpu}  load {row['load_average_1m_after']}", flush=True)
    if row["error_reasons"]:
        print(f"      errors: {row['error_reasons']}", flush=True)


HEADER = (f"{'cell':14} {'N':>5} {'ok?':4} {'errors':>6} {'tokens':>8} {'ev/1k':>6} {'model':>7} {'p50':>8} "
          f"{'p95':>8} {'p99':>8} {'max':>8} {'1st p50':>8} {'1st p95':>8}  CPU ms per 1,000 tokens")


async def sweep(args: argparse.Namespace, cells: list[Cell], pace: Pace, clients: Clients, rig: Rig,
                http: httpx.AsyncClient, suffix: str) -> dict[str, Any]:
    """Every level for each cell, the cells taking turns; a cell leaves after its first failing level
    unless ``--all-levels``."""
    rows: dict[Cell, list[dict[str, Any]]] = {cell: [] for cell in cells}
    alive = list(cells)
    for i, n in enumerate(args.levels):
        for cell in alive if i % 2 == 0 else alive[::-1]:
            row = await level(args, cell, pace, n, clients, rig)
            rows[cell].append(row)
            print_row(cell.name + suffix, row)
            await settle(http, None if cell.kind == "floor" else rig.products[cell.coalesce_ms].agent, args.settle_s)
        alive = [c for c in alive if args.all_levels or rows[c][-1]["passed"]]
        if not alive:
            break
    out = {}
    for cell, cell_rows in rows.items():
        passing = [r["streams"] for r in cell_rows if r["passed"]]
        out[cell.name + suffix] = {"speed": pace.speed, "tokens_per_stream": pace.tokens, "levels": cell_rows,
                                   "capacity_streams": max(passing) if passing else 0}
    return out


async def main(args: argparse.Namespace) -> dict[str, Any]:
    root = work_dir("bench-capacity")
    kinds = {"both": ["agent", "chat"], "floor": []}.get(args.target, [args.target])
    coalesce = args.coalesce_ms or [None]
    cells = [Cell(kind, ms) for kind in kinds for ms in coalesce]
    if args.target == "floor" or args.with_floor:
        cells.append(Cell("floor"))
    paces = speed_paces(args) if args.speeds else [Pace(1000 / args.token_delay_ms, args.tokens, args.ttft_ms)]
    results: dict[str, Any] = {
        "benchmark": "capacity", "machine": machine(), "database": args.db if kinds else None,
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
    }
    # Every stream of the largest level calls the model at once (at the default limit, 100, the
    # others would wait for a connection before their first token).
    agent_env = {"LLM_MAX_CONNECTIONS": str(max(*args.levels, 100)), **dict(kv.split("=", 1) for kv in args.set)}
    clients = Clients(args.clients)
    try:
        async with running_rig(args, root, kinds=kinds, coalesce=coalesce, floor=Cell("floor") in cells,
                               workers=args.workers, agent_env=agent_env) as rig, \
                httpx.AsyncClient(timeout=30) as http:
            print(HEADER, flush=True)
            for pace in paces:
                await set_pace(http, rig.llm, pace)
                suffix = f"/{pace.speed:g}tps" if len(paces) > 1 else ""
                results |= await sweep(args, cells, pace, clients, rig, http, suffix)
    finally:
        clients.close()
    print()
    for name, figures in results.items():
        if isinstance(figures, dict) and "capacity_streams" in figures:
            print(f"capacity ({name}): {figures['capacity_streams']} concurrent streams "
                  f"(p95 < {args.p95_limit_ms:g} ms, no errors)")
    results["logs"] = str(root)
    return results


def parse_levels(text: str) -> list[int]:
    """Stream counts separated by commas, each at least 1."""
    return comma_list(text, int, 1)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--target", choices=["agent", "chat", "both", "floor"], default="agent",
                        help="both: the agent and the chat cells on the same processes; floor: the bare relay "
                             "instead of the services")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--workers", type=int, default=1,
                        help="passed to each service as --workers N when N > 1 (chat then uses Redis)")
    parser.add_argument("--levels", type=parse_levels, default=parse_levels(DEFAULT_LEVELS))
    parser.add_argument("--all-levels", action="store_true", help="go on after a failing level")
    parser.add_argument("--clients", type=int, default=2, help="client processes the streams are spread over")
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--ttft-ms", type=float, default=200.0)
    parser.add_argument("--token-delay-ms", type=float, default=20.0)
    parser.add_argument("--speeds", type=number_list, default=None,
                        help="model tokens/s per stream, one sweep each (instead of --tokens and --token-delay-ms)")
    parser.add_argument("--stream-s", type=float, default=4.0, help="with --speeds: each stream is speed x this many tokens")
    parser.add_argument("--coalesce-ms", type=number_list, default=None,
                        help="STREAM_COALESCE_MS values, one service process (and chat) each, taking turns "
                             "(default: the services' own setting)")
    parser.add_argument("--with-floor", action="store_true", help="the bare relay takes its turn at each level too")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="an Agent Service setting (environment variable), repeatable")
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
    if args.speeds is not None and (0 in args.speeds or args.stream_s <= 0):
        parser.error("--speeds and --stream-s must be positive")
    if any("=" not in kv for kv in args.set):
        parser.error("--set takes KEY=VALUE")
    if args.out is None:
        workers = f"-w{args.workers}" if args.workers > 1 else ""
        args.out = REPO_ROOT / "loadtests" / "results" / f"bench_capacity-{args.target}-{args.db}{workers}.json"
    return args


if __name__ == "__main__":
    arguments = parse_args()
    write_results(arguments.out, asyncio.run(main(arguments)))
