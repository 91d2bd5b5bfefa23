"""What an agent turn costs the ConversationService as its conversation grows.

    .venv/bin/python -m loadtests.bench_history [--db sqlite|postgres] [--lengths 0,1000,5000] [--turns 20]

Starts the fake model, the Agent Service and the ConversationService (real processes on loopback,
as ``bench_chat``). For each length, one conversation is given that many earlier messages (written
straight to the chat's database, a second apart, alternating user and assistant, 200 characters
each), then takes ``--turns`` agent turns one after another. Reported per length: the
ConversationService's CPU per turn (``psutil`` user + system time over the turns) and its RSS
before, after and at its highest during the turns (sampled every 10 ms). A turn's history window
is the newest ``HISTORY_MAX_MESSAGES`` (10), so with a turn's work independent of the
conversation's length every row of the table is the same.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import psutil

from conversation_service.db.models import Message
from loadtests.bench_chat import Conversation
from loadtests.common import REPO_ROOT, machine, running_product, work_dir, write_results
from shared.db import create_engine, create_sessionmaker
from shared.protocol import utcnow
from shared.transactions import transaction

TEXT = ("the history of a long conversation " * 6)[:200]


async def _seed(database_url: str, conversation_id: str, count: int) -> None:
    engine = create_engine(database_url)
    try:
        start = utcnow() - timedelta(seconds=count + 60)
        sessionmaker = create_sessionmaker(engine)
        for first in range(0, count, 1000):
            async with transaction(sessionmaker) as session:
                session.add_all(
                    Message(conversation_id=conversation_id, role="user" if i % 2 == 0 else "assistant",
                            content=f"{i} {TEXT}", created_at=start + timedelta(seconds=i))
                    for i in range(first, min(count, first + 1000))
                )
    finally:
        await engine.dispose()


async def _watch_rss(pid: int, peak: list[int], stop: asyncio.Event) -> None:
    process = psutil.Process(pid)
    while not stop.is_set():
        peak[0] = max(peak[0], process.memory_info().rss)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.01)


async def _length(conv: Conversation, pid: int, turns: int) -> dict[str, Any]:
    await conv.turn("agent", "warm up")
    process = psutil.Process(pid)
    rss_before = process.memory_info().rss
    peak, stop = [rss_before], asyncio.Event()
    watcher = asyncio.create_task(_watch_rss(pid, peak, stop))
    times0, wall0 = process.cpu_times(), time.perf_counter()
    outcomes = [(await conv.turn("agent", f"question {i}")).outcome for i in range(turns)]
    times, wall = process.cpu_times(), time.perf_counter() - wall0
    stop.set()
    await watcher
    rss_after = process.memory_info().rss
    peak[0] = max(peak[0], rss_after)  # the highest seen includes the last reading, not only the 10 ms samples
    cpu = times.user + times.system - times0.user - times0.system
    mib = 2**20
    return {
        "turns": turns, "failed_turns": sum(o != "ok" for o in outcomes), "wall_s": round(wall, 2),
        "cpu_ms_per_turn": round(cpu / turns * 1000, 2),
        "rss_before_mib": round(rss_before / mib, 1), "rss_after_mib": round(rss_after / mib, 1),
        "rss_peak_mib": round(peak[0] / mib, 1), "rss_peak_above_before_mib": round((peak[0] - rss_before) / mib, 1),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    root = work_dir("bench-history")
    results: dict[str, Any] = {
        "benchmark": "history_length", "machine": machine(), "database": args.db,
        "settings": {"lengths": args.lengths, "turns": args.turns, "tokens": args.tokens},
        "lengths": {},
    }
    async with running_product(args, root) as product, httpx.AsyncClient(timeout=httpx.Timeout(60.0)) as http:
        chat = product.chat
        assert chat is not None
        for length in args.lengths:
            conv = Conversation(http, chat.url, f"history-{length}")
            await conv.open()
            try:
                await _seed(chat.env["CONVERSATION_DATABASE_URL"], conv.id, length)
                row = results["lengths"][str(length)] = await _length(conv, chat.pid, args.turns)
            finally:
                await conv.close()
            print(f"  {length:6} earlier messages: {row}", flush=True)
    results["logs"] = str(root)
    return results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--lengths", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1000, 5000])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--ttft-ms", type=float, default=0.0)
    parser.add_argument("--token-delay-ms", type=float, default=0.0)
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = REPO_ROOT / "loadtests" / "results" / f"bench_history-{args.db}.json"
    return args


if __name__ == "__main__":
    arguments = parse_args()
    write_results(arguments.out, asyncio.run(main(arguments)))
