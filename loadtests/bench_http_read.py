"""CPU per streamed chunk of one HTTP client process: httpx's own transport against ``AiohttpTransport``.

    .venv/bin/python -m loadtests.bench_http_read [--streams 100] [--rounds 3] [--tokens 200]

The fake model (its own process) answers ``--streams`` chat completions at once, paced like a hosted
model (``--ttft-ms``, ``--token-delay-ms``: one HTTP chunk per token). This process reads them with
``httpx.AsyncClient`` over each transport in turn, ``--rounds`` rounds each on one kept client (the
pool's connections are reused from the second round on, as in the services), and reports its own
CPU (user + system) per chunk read. The client side of what the Agent Service does per model token
and the ConversationService per agent event (shared/fastpath/aiohttp_transport.py).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
from pathlib import Path
from typing import Any

import httpx
import uvloop

from loadtests.common import REPO_ROOT, fake_llm, machine, running, work_dir, write_results
from shared.fastpath.aiohttp_transport import AiohttpTransport
from shared.llm.openai_sse import DataDecoder

BODY = b'{"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": true}'


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _read_one(client: httpx.AsyncClient, url: str) -> int:
    events = 0
    decoder = DataDecoder()
    async with client.stream("POST", url, content=BODY, headers={"Content-Type": "application/json"}) as response:
        response.raise_for_status()
        async for chunk in response.aiter_bytes():
            events += len(decoder.feed(chunk))
    return events


async def _measure(name: str, client: httpx.AsyncClient, url: str, args: argparse.Namespace) -> dict[str, Any]:
    rounds = []
    async with client:
        for _ in range(args.rounds):
            started = _cpu_s()
            events = sum(await asyncio.gather(*(_read_one(client, url) for _ in range(args.streams))))
            rounds.append({"events": events, "cpu_s": round(_cpu_s() - started, 3),
                           "cpu_us_per_event": round((_cpu_s() - started) / events * 1e6, 1)})
    per_event = [r["cpu_us_per_event"] for r in rounds]
    print(f"{name:18} CPU us per event, rounds: {per_event}  median {statistics.median(per_event):.1f}", flush=True)
    return {"rounds": rounds, "median_cpu_us_per_event": statistics.median(per_event)}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    root = work_dir("bench-http-read")
    llm = fake_llm(root, tokens=args.tokens, ttft_ms=args.ttft_ms, token_delay_ms=args.token_delay_ms)
    results: dict[str, Any] = {"benchmark": "http_read", "machine": machine(),
                               "settings": {k: v for k, v in vars(args).items() if k != "out"}}
    async with running(llm):
        url = f"{llm.url}/v1/chat/completions"
        timeout = httpx.Timeout(30.0)
        limit = args.streams
        results["httpx"] = await _measure("httpx transport", httpx.AsyncClient(
            timeout=timeout, limits=httpx.Limits(max_connections=limit, max_keepalive_connections=limit)), url, args)
        results["aiohttp_transport"] = await _measure("AiohttpTransport", httpx.AsyncClient(
            timeout=timeout, transport=AiohttpTransport(max_connections=limit)), url, args)
    return results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--ttft-ms", type=float, default=200.0)
    parser.add_argument("--token-delay-ms", type=float, default=20.0)
    parser.add_argument("--out", type=Path, default=None)
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse_args()
    outcome = uvloop.run(main(arguments))
    write_results(arguments.out or REPO_ROOT / "loadtests" / "results" / "http-read.json", outcome)
