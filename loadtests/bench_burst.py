"""Bursts: N streams started at once, R rounds, against the product as it ships (default settings).

    .venv/bin/python -m loadtests.bench_burst [--n 200] [--rounds 5] [--target agent|chat]
        [--db sqlite|postgres] [--tokens 200] [--ttft-ms 0] [--token-delay-ms 0] [--set KEY=VALUE ...]
        [--out FILE] [--append]

Starts, as real processes on loopback (``common.running_product``): the fake model (fast by default:
every token at once; each token's text is the time it was sent), the Agent Service and, for
``--target chat``, the ConversationService, on fresh databases. Each round N streams start at once
(``capacity_client``, in ``--clients`` processes): ``agent`` posts N executes and reads each SSE
stream to its end; ``chat`` opens N conversations with their WebSockets first, then posts an
``/agent`` message to each and reads each reply to its end. Between rounds the Agent Service is left
to finish (``common.settle``).

Per round it prints: the streams that completed; what ended the others, by kind (an HTTP status, a
503 with or without Retry-After, an ERROR event's code, no end in time); the time to each stream's
first event (p50, p95); the longest stall, the longest time in the round during which no event and no
answer arrived on any stream (a burst that stalls shows here, however it ends); the round's total
time. A round passes when every stream completed or was refused visibly (503 with Retry-After), no
more than ``--stall-limit-s`` passed without anything arriving, and not every stream was refused.

``--set KEY=VALUE`` passes a setting to the Agent Service (``LLM_MAX_CONNECTIONS=1000``...); the
defaults are the product's. ``--append`` adds the run to ``--out``'s list of runs instead of replacing it.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import time
from pathlib import Path
from typing import Any

import httpx

from loadtests.capacity_client import Clients, LevelSpec, Share, split
from loadtests.common import (
    AGENT_KEY,
    JWT_SECRET,
    REPO_ROOT,
    machine,
    percentile,
    running_product,
    settle,
    work_dir,
    write_results,
)

REFUSED_VISIBLY = ("HTTP 503 with Retry-After", "post message: HTTP 503 with Retry-After")


def longest_stall(activity: list[float], start: float, end: float) -> float:
    """The longest time within [start, end] in which nothing arrived on any stream."""
    moments = sorted(t for t in activity if start <= t <= end)
    edges = [start, *moments, end]
    return max((b - a for a, b in itertools.pairwise(edges)), default=0.0)


def round_row(n: int, share: Share, started: float, args: argparse.Namespace) -> dict[str, Any]:
    activity = list(share.activity)
    # Until the last stream ended, or was given up at the timeout having got nothing until then.
    ended = max([*activity, share.ended or started])
    first = list(share.first_event)
    refused = sum(share.errors[k] for k in REFUSED_VISIBLY)
    errors = {k: v for k, v in share.errors.items()}
    stall = longest_stall(activity, started, ended)
    unanswered = n - share.completed - refused
    return {
        "streams": n, "completed": share.completed, "refused_503_retry_after": refused, "errors": errors,
        "events": share.events,
        "first_event_ms": {"p50": round(percentile(first, 0.5) * 1000, 1) if first else None,
                           "p95": round(percentile(first, 0.95) * 1000, 1) if first else None},
        "longest_stall_s": round(stall, 3), "total_s": round(ended - started, 2),
        "passed": unanswered == 0 and stall <= args.stall_limit_s and refused < n,
    }


def print_row(index: int, row: dict[str, Any]) -> None:
    first = row["first_event_ms"]
    others = {k: v for k, v in row["errors"].items() if k not in REFUSED_VISIBLY}
    print(f"round {index + 1}: {'PASS' if row['passed'] else 'FAIL'}  completed {row['completed']}/{row['streams']}  "
          f"503+Retry-After {row['refused_503_retry_after']}  first event p50 {first['p50']} ms p95 {first['p95']} ms  "
          f"longest stall {row['longest_stall_s']:.2f} s  total {row['total_s']:.2f} s"
          + (f"  other endings {others}" if others else ""), flush=True)


async def run_rounds(args: argparse.Namespace, clients: Clients, product, http: httpx.AsyncClient) -> list[dict]:
    urls = {"agent": product.agent.url, "chat": product.chat.url if product.chat else ""}
    rows = []
    for index in range(args.rounds):
        specs = [LevelSpec(target=args.target, streams=k, tokens=args.tokens, timeout_s=args.round_timeout_s,
                           agent_url=urls["agent"], agent_key=AGENT_KEY, chat_url=urls["chat"], jwt_secret=JWT_SECRET,
                           name=f"burst{index}-{i}")
                 for i, k in enumerate(split(args.n, len(clients.procs)))]
        started = 0.0

        def go() -> None:
            nonlocal started
            started = time.time()

        share = await clients.run(specs, go)
        row = round_row(args.n, share, started, args)
        row["load_average_1m_after"] = round(os.getloadavg()[0], 2)
        rows.append(row)
        print_row(index, row)
        await settle(http, product.agent, args.settle_s)
    return rows


async def main(args: argparse.Namespace) -> dict[str, Any]:
    root = work_dir("bench-burst")
    settings = dict(pair.split("=", 1) for pair in args.set)
    results: dict[str, Any] = {
        "benchmark": "burst", "label": args.label, "machine": machine(), "database": args.db, "target": args.target,
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "set", "label")},
        "agent_settings": settings,
    }
    print(f"burst: {args.n} at once x {args.rounds} rounds, {args.target}, {args.db}, "
          f"settings {settings or 'default'}", flush=True)
    clients = Clients(args.clients)
    try:
        async with running_product(args, root, chat=args.target == "chat", stamp=True, agent_env=settings) as product, \
                httpx.AsyncClient(timeout=30) as http:
            results["rounds"] = await run_rounds(args, clients, product, http)
    finally:
        clients.close()
    results["passed"] = all(r["passed"] for r in results["rounds"])
    results["logs"] = str(root)
    return results


def save(args: argparse.Namespace, results: dict[str, Any]) -> None:
    if args.append and args.out.exists():
        runs = json.loads(args.out.read_text()).get("runs", [])
        write_results(args.out, {"runs": [*runs, results]})
    else:
        write_results(args.out, {"runs": [results]})


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--n", type=int, default=200, help="streams started at once each round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--target", choices=["agent", "chat"], default="agent",
                        help="agent: the Agent Service alone; chat: end to end through the ConversationService")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--clients", type=int, default=2, help="client processes the streams are spread over")
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--ttft-ms", type=float, default=0.0)
    parser.add_argument("--token-delay-ms", type=float, default=0.0)
    parser.add_argument("--round-timeout-s", type=float, default=180.0,
                        help="a stream with no end this long after the round started counts as unanswered")
    parser.add_argument("--stall-limit-s", type=float, default=10.0,
                        help="a round with a longer time in which nothing arrived on any stream fails")
    parser.add_argument("--settle-s", type=float, default=2.0, help="quiet time between rounds")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="an Agent Service setting (environment variable), repeatable")
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--append", action="store_true", help="add this run to --out's runs")
    parser.add_argument("--label", default="", help="a name for this run in the results")
    args = parser.parse_args(argv)
    if args.n < 1 or args.rounds < 1 or args.clients < 1 or args.tokens < 1:
        parser.error("--n, --rounds, --clients and --tokens must be at least 1")
    if any("=" not in pair for pair in args.set):
        parser.error("--set takes KEY=VALUE")
    if args.out is None:
        args.out = REPO_ROOT / "loadtests" / "results" / f"bench_burst-{args.target}-{args.db}-{args.n}.json"
    return args


if __name__ == "__main__":
    arguments = parse_args()
    outcome = asyncio.run(main(arguments))
    save(arguments, outcome)
    raise SystemExit(0 if outcome["passed"] else 1)
