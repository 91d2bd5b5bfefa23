"""ConversationService benchmark (issue 3): delegation overhead, per-event processing, routing time.

    .venv/bin/python -m loadtests.bench_chat [--db sqlite|postgres] [--conversations 20] ...

Starts, as real processes on loopback: the fake OpenAI-compatible model with a fixed time to first
token, the Agent Service and the ConversationService, both behind that same model. Then
``--conversations`` conversations per path (``/agent`` messages, delegated, and plain messages to
the direct LLM), each with its WebSocket open, take ``--rounds`` turns each:

- ``--arrival steady`` (default): both paths' conversations at once, each sending its next message
  a think time after the last reply ended, like people chatting; both paths see the same load.
- ``--arrival burst``: every conversation of one path sends at the same instant, the paths taking
  turns: the worst case, where the set-up work of all of them queues for the CPU together.

Figures:

- first chunk, end to end: POST of the message -> first ``message.delta`` frame on the WebSocket
  (client clock); agent minus direct is the delegation overhead. The services' own
  ``conversation_agent_first_chunk_seconds`` / ``conversation_direct_first_chunk_seconds`` are
  reported beside it.
- per-event processing: ``conversation_agent_event_delivery_seconds`` (agent SSE event received ->
  its WebSocket frame sent) and ``conversation_agent_event_processing_seconds`` (-> frame published).
- routing decision time: ``conversation_routing_decision_seconds``, plus the MessageRouter timed
  in this process on the same messages for exact percentiles.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import websockets

from conversation_service.auth.tokens import issue_token
from conversation_service.routing.router import MessageRouter
from conversation_service.settings.routing import RoutingSettings
from loadtests.common import (
    JWT_SECRET,
    REPO_ROOT,
    histogram_delta,
    machine,
    running_product,
    scrape,
    summarize_seconds,
    verdict,
    work_dir,
    write_results,
)

TURN_TIMEOUT_S = 120


@dataclass
class Turn:
    path: str
    first_chunk: float | None
    done: float | None
    deltas: int
    outcome: str
    pair: tuple[int, int] | None = None
    frames: int = 0  # every frame with a seq this turn's client received


class Conversation:
    def __init__(self, http: httpx.AsyncClient, base_url: str, user: str) -> None:
        self.http = http
        self.base_url = base_url
        self.headers = {"Authorization": f"Bearer {issue_token(JWT_SECRET, user, 'bench', ttl_s=24 * 3600)}"}
        self.id = ""
        self.ws: Any = None

    async def open(self) -> None:
        r = await self.http.post(f"{self.base_url}/conversations", json={"title": "bench"}, headers=self.headers)
        r.raise_for_status()
        # The row is committed before the 201, so the WebSocket can be opened at once.
        self.id = r.json()["id"]
        url = self.base_url.replace("http://", "ws://") + f"/conversations/{self.id}/ws"
        # No keepalive pings: on a loaded machine a late pong would end a turn the benchmark is measuring.
        self.ws = await websockets.connect(url, additional_headers=self.headers, max_size=2**22, ping_interval=None)

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()

    async def turn(self, path: str, text: str) -> Turn:
        content = f"/agent {text}" if path == "agent" else text
        started = time.perf_counter()
        r = await self.http.post(f"{self.base_url}/conversations/{self.id}/messages",
                                 json={"content": content}, headers=self.headers)
        r.raise_for_status()
        target = r.json()["route"]["target"]
        expected = "agent" if path == "agent" else "direct_llm"
        if target != expected:
            raise RuntimeError(f"message routed to {target}, expected {expected}")
        first = None
        deltas = frames = 0
        # An agent reply ends with agent.complete, a direct one with its message.completed.
        end = "agent.complete" if path == "agent" else "message.completed"
        async with asyncio.timeout(TURN_TIMEOUT_S):
            while True:
                frame = orjson.loads(await self.ws.recv())
                kind = frame["type"]
                frames += "seq" in frame
                if kind == "message.delta":
                    deltas += 1
                    if first is None:
                        first = time.perf_counter() - started
                elif kind == end:
                    return Turn(path, first, time.perf_counter() - started, deltas, "ok", frames=frames)
                elif kind in ("message.error", "agent.error", "notice"):
                    return Turn(path, first, time.perf_counter() - started, deltas, kind, frames=frames)


async def burst(convs: dict[str, list[Conversation]], rounds: int) -> list[Turn]:
    """Every conversation of a path sends at the same instant; the paths take turns. The worst
    case for queueing: the set-up work of all of them competes for the CPU at once."""
    turns: list[Turn] = []
    for r in range(rounds):
        for path, group in convs.items():
            turns.extend(await asyncio.gather(*(c.turn(path, f"what is {r}*7") for c in group)))
    return turns


async def steady(
    convs: dict[str, list[Conversation]], rounds: int, think_s: float, rng: random.Random,
) -> list[Turn]:
    """Conversations in pairs, one per path, like people chatting: both of a pair send at the same
    instant, read their whole replies, think (uniform 0.5-1.5 x ``think_s``), send again; the
    pairs start spread over one think time. The two messages of a pair meet the same load, so
    their difference is the delegation's own cost (``Turn.pair`` links them)."""

    async def chat(index: int, agent: Conversation, direct: Conversation, start: float) -> list[Turn]:
        await asyncio.sleep(start)  # pacing of the simulated users, not synchronisation
        mine: list[Turn] = []
        for r in range(rounds):
            pair = (index, r)
            both = await asyncio.gather(agent.turn("agent", f"what is {r}*7"), direct.turn("direct", f"what is {r}*7"))
            for turn in both:
                turn.pair = pair
            mine.extend(both)
            await asyncio.sleep(think_s * rng.uniform(0.5, 1.5))
        return mine

    runs = [chat(i, agent, direct, rng.uniform(0, think_s))
            for i, (agent, direct) in enumerate(zip(convs["agent"], convs["direct"], strict=True))]
    return [turn for mine in await asyncio.gather(*runs) for turn in mine]


def paired_overhead(turns: list[Turn]) -> list[float]:
    """Agent minus direct first chunk, per pair of messages sent at the same instant."""
    firsts: dict[tuple[int, int], dict[str, float]] = {}
    for turn in turns:
        if turn.pair is not None and turn.outcome == "ok" and turn.first_chunk is not None:
            firsts.setdefault(turn.pair, {})[turn.path] = turn.first_chunk
    return [f["agent"] - f["direct"] for f in firsts.values() if len(f) == 2]


def route_timing(samples: int) -> dict[str, Any]:
    """The MessageRouter as the service builds it (default settings), timed call by call."""
    router = MessageRouter(RoutingSettings())
    messages = ["/agent what is 17*23", "hello there, how are you?", "please search the docs for the SLA",
                "a longer message " * 40, "@agent calculate 2+2"]
    timings = []
    for i in range(samples):
        text = messages[i % len(messages)]
        t0 = time.perf_counter()
        router.route(text, user_id="u", org_id="o", has_active_session=bool(i % 2), agent_available=True)
        timings.append(time.perf_counter() - t0)
    return summarize_seconds(timings)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    root = work_dir("bench-chat")
    results: dict[str, Any] = {
        "benchmark": "conversation_service", "machine": machine(), "database": args.db,
        "settings": {"conversations": args.conversations, "arrival": args.arrival, "rounds_per_path": args.rounds,
                     "think_ms": args.think_ms if args.arrival == "steady" else None, "tokens": args.tokens,
                     "ttft_ms": args.ttft_ms, "token_delay_ms": args.token_delay_ms, "log_level": args.log_level},
    }
    limits = httpx.Limits(max_connections=args.conversations * 2 + 10)
    async with running_product(args, root) as product, \
            httpx.AsyncClient(timeout=httpx.Timeout(60.0), limits=limits) as http:
        chat = product.chat
        # Separate conversations per path: once a conversation has an agent session, the
        # router keeps it with the agent.
        convs = {path: [Conversation(http, chat.url, f"bench-{path}-{i}") for i in range(args.conversations)]
                 for path in ("agent", "direct")}
        for group in convs.values():
            await asyncio.gather(*(c.open() for c in group))
        try:
            # Warm-up: one turn per conversation on each path, not counted.
            for path, group in convs.items():
                await asyncio.gather(*(c.turn(path, "warm up") for c in group))
            before = await scrape(http, chat.url)
            if args.arrival == "burst":
                turns = await burst(convs, args.rounds)
            else:
                turns = await steady(convs, args.rounds, args.think_ms / 1000, random.Random(args.seed))
            after = await scrape(http, chat.url)
        finally:
            for group in convs.values():
                await asyncio.gather(*(c.close() for c in group), return_exceptions=True)

    failed = [t for t in turns if t.outcome != "ok"]
    figures: dict[str, Any] = {"turns": len(turns), "failed_turns": len(failed),
                               "failed_outcomes": sorted({t.outcome for t in failed})}
    for path in ("agent", "direct"):
        mine = [t for t in turns if t.path == path and t.outcome == "ok"]
        figures[f"{path}_first_chunk_end_to_end"] = summarize_seconds([t.first_chunk for t in mine if t.first_chunk])
        figures[f"{path}_reply_end_to_end"] = summarize_seconds([t.done for t in mine if t.done])
        figures[f"{path}_deltas_per_reply_min"] = min((t.deltas for t in mine), default=0)
    overhead = {q: round(figures["agent_first_chunk_end_to_end"][q] - figures["direct_first_chunk_end_to_end"][q], 3)
                for q in ("p50_ms", "p95_ms", "p99_ms")}
    figures["delegation_overhead_first_chunk_ms"] = overhead
    if args.arrival == "steady":
        figures["delegation_overhead_paired"] = summarize_seconds(paired_overhead(turns))
    figures["server_agent_first_chunk"] = histogram_delta(before, after, "conversation_agent_first_chunk_seconds").summary()
    figures["server_direct_first_chunk"] = histogram_delta(before, after, "conversation_direct_first_chunk_seconds").summary()
    delivery = histogram_delta(before, after, "conversation_agent_event_delivery_seconds")
    figures["event_sse_received_to_ws_sent"] = delivery.summary()
    figures["event_sse_received_to_ws_sent_share_at_most_2ms"] = delivery.share_at_most(0.002)
    figures["event_sse_received_to_frame_published"] = histogram_delta(
        before, after, "conversation_agent_event_processing_seconds").summary()
    figures["event_sse_received_to_frame_published_answer_chunks"] = histogram_delta(
        before, after, "conversation_agent_event_processing_seconds", type="ANSWER_CHUNK").summary()
    routing = histogram_delta(before, after, "conversation_routing_decision_seconds")
    figures["routing_decision_in_service"] = routing.summary()
    figures["routing_decision_in_service_share_at_most_1ms"] = routing.share_at_most(0.001)
    figures["routing_decision_in_process"] = route_timing(args.route_samples)
    results["figures"] = figures
    results["turns"] = [{"path": t.path, "pair": t.pair, "outcome": t.outcome,
                         "first_chunk_ms": round(t.first_chunk * 1000, 3) if t.first_chunk else None,
                         "done_ms": round(t.done * 1000, 3) if t.done else None} for t in turns]
    # Steady: the p95 of the per-pair differences; burst: the difference of the two p95s.
    overhead_p95 = figures["delegation_overhead_paired"]["p95_ms"] if args.arrival == "steady" else overhead["p95_ms"]
    results["targets"] = {
        "delegation_overhead_p95_le_15ms": {"value_ms": overhead_p95, "verdict": verdict(overhead_p95, 15)},
        "delegation_overhead_p95_spec_lt_500ms": {"value_ms": overhead_p95, "verdict": verdict(overhead_p95, 500)},
        "event_processing_p95_le_2ms": {"value_ms": delivery.summary()["p95_ms"],
                                        "verdict": verdict(delivery.summary()["p95_ms"], 2)},
        "event_processing_p95_spec_lt_50ms": {"value_ms": delivery.summary()["p95_ms"],
                                              "verdict": verdict(delivery.summary()["p95_ms"], 50)},
        "routing_decision_p99_le_1ms": {"value_ms": routing.summary()["p99_ms"],
                                        "verdict": verdict(routing.summary()["p99_ms"], 1)},
    }
    for key, value in figures.items():
        print(f"  {key}: {value}")
    print("\n== targets ==")
    for name, target in results["targets"].items():
        print(f"  {name}: {target}")
    results["logs"] = str(root)
    return results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--conversations", type=int, default=20)
    parser.add_argument("--arrival", choices=["steady", "burst"], default="steady",
                        help="steady: both paths' conversations at once, each sending again after a think "
                             "time; burst: all conversations of a path send at the same instant")
    parser.add_argument("--rounds", type=int, default=5, help="turns per conversation")
    parser.add_argument("--think-ms", type=float, default=1000.0, help="steady: mean pause between turns")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--ttft-ms", type=float, default=200.0)
    parser.add_argument("--token-delay-ms", type=float, default=0.0)
    parser.add_argument("--route-samples", type=int, default=20_000)
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = REPO_ROOT / "loadtests" / "results" / f"bench_chat-{args.db}-{args.arrival}.json"
    return args


if __name__ == "__main__":
    arguments = parse_args()
    write_results(arguments.out, asyncio.run(main(arguments)))
