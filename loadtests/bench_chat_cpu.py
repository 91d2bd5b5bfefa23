"""CPU cost of streaming in the ConversationService: CPU seconds per 10,000 delivered frames.

    .venv/bin/python -m loadtests.bench_chat_cpu [--db sqlite|postgres] [--conversations 100] \\
        [--rounds 1] [--profile DIR]

Starts the same processes as ``bench_chat`` (the paced fake OpenAI-compatible model, the Agent
Service, the ConversationService, real processes on loopback). ``--conversations`` conversations per
path, each with its WebSocket open, take a warm-up turn, then ``--rounds`` turns all at once:
first every agent conversation (``/agent`` messages), then every direct one (plain messages to
the LLM). For each phase the ConversationService's CPU time (user + system, ``psutil``
``cpu_times`` of its process, read before and after) is divided by the frames its WebSocket clients
received in that phase (every frame with a seq: the user's message, deltas, agent.* and the end
frames), and, on the agent path, by the agent events the service received
(``conversation_agent_event_processing_seconds`` count: answer chunks read together go out as one
delta, so a loaded Agent Service means fewer frames than events). ``--profile DIR`` records the agent phase with ``py-spy`` (raw collapsed stacks, one file
per phase, ``--gil``: only what holds the interpreter, so idle waits do not count) for reading
as text.

Target: at most 1 CPU second per 10,000 agent events.

``--speeds 50,500,2000 [--coalesce-ms 0,25]`` runs, instead, the cost per token
(``common.speed_matrix``): at each model speed, a ConversationService and its Agent Service per
``STREAM_COALESCE_MS`` value and the bare relay take turns streaming the same paced, stamped replies
(``/agent`` messages read on the conversation's WebSocket); per cell each service's CPU per 1,000
tokens delivered, the added latency per token (model stamp -> the browser's socket) and the first
token's.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from loadtests.bench_chat import Conversation, Turn
from loadtests.common import (
    REPO_ROOT,
    Process,
    add_speed_options,
    histogram_delta,
    machine,
    running_product,
    scrape,
    speed_matrix,
    work_dir,
    write_results,
)

TARGET_CPU_S_PER_10K = 1.0


def _cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def _profiler(pid: int, out: Path) -> subprocess.Popen | None:
    """``py-spy record`` of ``pid`` until stopped with SIGINT (it then writes ``out``)."""
    exe = shutil.which("py-spy") or str(Path(__import__("sys").executable).parent / "py-spy")
    if not Path(exe).exists():
        print("py-spy not found: no profile")
        return None
    return subprocess.Popen([exe, "record", "--pid", str(pid), "--format", "raw", "--rate", "100",
                             "--output", str(out), "--nonblocking", "--gil"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


async def _stop_profiler(proc: subprocess.Popen | None) -> None:
    if proc is None:
        return
    proc.send_signal(2)  # SIGINT: py-spy writes what it recorded
    await asyncio.to_thread(proc.wait, 30)


async def _phase(
    path: str, group: list[Conversation], rounds: int, chat: Process, http: httpx.AsyncClient, profile: Path | None,
) -> dict[str, Any]:
    pid = chat.pid
    spy = _profiler(pid, profile / f"{path}.txt") if profile is not None else None
    before = await scrape(http, chat.url)
    cpu0, wall0 = _cpu_seconds(pid), time.perf_counter()
    turns: list[Turn] = []
    for r in range(rounds):
        turns.extend(await asyncio.gather(*(c.turn(path, f"what is {r}*7") for c in group)))
    cpu, wall = _cpu_seconds(pid) - cpu0, time.perf_counter() - wall0
    await _stop_profiler(spy)
    # Agent events received by the service (answer chunks read together share one delta frame).
    events = int(histogram_delta(before, await scrape(http, chat.url), "conversation_agent_event_processing_seconds").count)
    frames = sum(t.frames for t in turns)
    deltas = sum(t.deltas for t in turns)
    return {
        "turns": len(turns), "failed_turns": sum(t.outcome != "ok" for t in turns),
        "frames": frames, "deltas": deltas, "agent_events": events, "cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
        "cpu_s_per_10k_agent_events": round(cpu / events * 10_000, 3) if events else None,
        "cpu_s_per_10k_frames": round(cpu / frames * 10_000, 3) if frames else None,
        "cpu_us_per_delta": round(cpu / deltas * 1e6, 1) if deltas else None,
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    if args.speeds:
        return {"benchmark": "conversation_service_per_token", **await speed_matrix(args, "chat")}
    root = work_dir("bench-chat-cpu")
    results: dict[str, Any] = {
        "benchmark": "conversation_service_cpu", "machine": machine(), "database": args.db,
        "settings": {"conversations": args.conversations, "rounds": args.rounds, "tokens": args.tokens,
                     "ttft_ms": args.ttft_ms, "token_delay_ms": args.token_delay_ms},
    }
    limits = httpx.Limits(max_connections=args.conversations * 2 + 10)
    async with running_product(args, root) as product, \
            httpx.AsyncClient(timeout=httpx.Timeout(60.0), limits=limits) as http:
        chat = product.chat
        convs = {path: [Conversation(http, chat.url, f"cpu-{path}-{i}") for i in range(args.conversations)]
                 for path in ("agent", "direct")}
        phases: dict[str, Any] = {}
        try:
            for group in convs.values():
                await asyncio.gather(*(c.open() for c in group))
            for path, group in convs.items():  # warm-up, not counted
                await asyncio.gather(*(c.turn(path, "warm up") for c in group))
            if args.profile is not None:
                args.profile.mkdir(parents=True, exist_ok=True)
            for path, group in convs.items():
                phases[path] = await _phase(path, group, args.rounds, chat, http, args.profile)
        finally:
            for group in convs.values():
                await asyncio.gather(*(c.close() for c in group), return_exceptions=True)
    results["phases"] = phases
    value = phases["agent"]["cpu_s_per_10k_agent_events"]
    results["target"] = {"agent_cpu_s_per_10k_agent_events_le_1": {
        "value": value, "verdict": "no data" if value is None else ("MET" if value <= TARGET_CPU_S_PER_10K else "MISSED")}}
    for path, figures in phases.items():
        print(f"  {path}: {figures}")
    print(f"  target: {results['target']}")
    results["logs"] = str(root)
    return results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--conversations", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1, help="turns per conversation in each measured phase")
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--ttft-ms", type=float, default=200.0)
    parser.add_argument("--token-delay-ms", type=float, default=20.0)
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("--profile", type=Path, default=None, help="directory for py-spy raw profiles")
    parser.add_argument("--out", type=Path, default=None)
    add_speed_options(parser)
    args = parser.parse_args(argv)
    if args.out is None:
        speeds = "-speeds" if args.speeds else ""
        args.out = REPO_ROOT / "loadtests" / "results" / f"bench_chat_cpu-{args.db}{speeds}.json"
    return args


if __name__ == "__main__":
    arguments = parse_args()
    write_results(arguments.out, asyncio.run(main(arguments)))
