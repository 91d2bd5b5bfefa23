"""The floor under the services' CPU per event: a bare relay's CPU per 10,000 streamed events.

    .venv/bin/python -m loadtests.bench_floor [--runs 100] [--rounds 3] [--tokens 200]

Starts, as real processes on loopback, the fake OpenAI-compatible model (paced like a hosted model:
200 ms to the first token, 20 ms per token) and ``loadtests.floor_relay``, which reads the model's
stream and writes each token to its client as one SSE event and does nothing else. ``--runs``
streams at once, ``--rounds`` times; the relay's CPU seconds (user + system) per 10,000 events its
clients received. Compare with ``bench_agent --cpu-runs`` on the same pace: the difference is what
the Agent Service's own work costs (the event log, envelopes, runs, the database).

``--speeds 50,500,2000`` measures the relay per token instead (``common.speed_matrix`` with the
relay alone): at each model speed, its CPU per 1,000 tokens and the added latency per token (model
stamp -> client). ``bench_agent`` and ``bench_chat_cpu`` run the relay beside the services the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from loadtests.common import (
    Process,
    add_speed_options,
    fake_llm,
    machine,
    running,
    speed_matrix,
    work_dir,
    write_results,
)
from shared.sse import SSEDecoder


async def relay_run(client: httpx.AsyncClient, url: str) -> int:
    """One relayed stream read to its end; the number of events received."""
    decoder = SSEDecoder()
    events = 0
    async with client.stream("POST", f"{url}/relay") as response:
        response.raise_for_status()
        async for raw in response.aiter_bytes():
            events += len(decoder.feed(raw))
    return events


async def main(args: argparse.Namespace) -> dict[str, Any]:
    root = work_dir("bench-floor")
    llm = fake_llm(root, tokens=args.tokens, ttft_ms=args.ttft_ms, token_delay_ms=args.token_delay_ms)
    relay = Process("floor_relay", ["-m", "loadtests.floor_relay", "--model", llm.url], {}, root)
    limits = httpx.Limits(max_connections=args.runs + 10, max_keepalive_connections=args.runs + 10)
    async with running(llm, relay), httpx.AsyncClient(timeout=httpx.Timeout(120.0), limits=limits) as client:
        await asyncio.gather(*(relay_run(client, relay.url) for _ in range(min(10, args.runs))))  # warm-up
        proc = psutil.Process(relay.pid)
        before = proc.cpu_times()
        t0 = time.perf_counter()
        events = 0
        for _ in range(args.rounds):
            events += sum(await asyncio.gather(*(relay_run(client, relay.url) for _ in range(args.runs))))
        wall = time.perf_counter() - t0
        after = proc.cpu_times()
    cpu = (after.user - before.user) + (after.system - before.system)
    expected = args.runs * args.rounds * (args.tokens + 1)
    if events != expected:
        raise RuntimeError(f"{events} events received, {expected} expected")
    return {
        "machine": machine(),
        "config": {"runs": args.runs, "rounds": args.rounds, "tokens": args.tokens, "ttft_ms": args.ttft_ms,
                   "token_delay_ms": args.token_delay_ms},
        "events": events, "wall_s": round(wall, 2), "cpu_s": round(cpu, 3),
        "cpu_s_per_10k_events": round(cpu / events * 10_000, 3),
        "cpu_us_per_event": round(cpu / events * 1e6, 1),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--ttft-ms", type=float, default=200.0)
    parser.add_argument("--token-delay-ms", type=float, default=20.0)
    parser.add_argument("--out", type=Path, default=None)
    add_speed_options(parser, coalesce_default=None)
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = Path("loadtests/results/floor-speeds.json" if args.speeds else "loadtests/results/floor.json")
    if args.speeds and not args.floor:
        parser.error("--no-floor leaves nothing to measure here")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.speeds:
        write_results(arguments.out, {"benchmark": "floor_per_token", **asyncio.run(speed_matrix(arguments, None))})
        sys.exit(0)
    results = asyncio.run(main(arguments))
    for key in ("events", "wall_s", "cpu_s", "cpu_s_per_10k_events", "cpu_us_per_event"):
        print(f"  {key}: {results[key]}")
    write_results(arguments.out, results)
    sys.exit(0)
