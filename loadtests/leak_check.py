"""Memory leak check (spec Story 8: "no leaks over 1000 requests", heap profiling).

    .venv/bin/python -m loadtests.leak_check [--requests 1000] [--rounds 6] [--concurrency 8] [--db sqlite|postgres]

Starts the Agent Service and the ConversationService as processes on loopback with
``DEBUG_HEAP_PROFILE=1`` (tracemalloc from start-up, ``GET /debug/heap``) and the built-in model,
then drives ``--requests`` chat turns over WebSockets like a chat client, in ``--rounds`` equal
rounds: 70% direct messages, 30% ``/agent`` messages, a third of those a trip request that the
agent answers with ASK_USER, which the client answers (``POST /conversations/{id}/agent-answer``).
Every conversation takes ``--turns-per-conversation`` turns and is then left for a new one, so
state kept per conversation or per agent session shows up as growth.

After each round, once every turn has ended, it records per service: RSS (psutil), tracemalloc's
traced total, live asyncio tasks, gc objects, and the allocation sites that grew since the
previous round. The first round is warm-up (pools, caches, lazy imports); the verdict is on the
rest: traced growth per round and per 1000 requests, and the sites that grew in most rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from websockets.asyncio.client import connect

from conversation_service.auth.tokens import issue_token
from loadtests.common import (
    AGENT_KEY,
    JWT_SECRET,
    REPO_ROOT,
    Process,
    databases,
    machine,
    read_heaps,
    running,
    work_dir,
    write_results,
)

QUESTIONS = ["what is 17*23", "what time is it", "hello there", "what is 12*12"]
TRIP_REQUEST = "/agent plan a trip"
TRIP_ANSWER = "Lisbon for 3 days"
MIB = 2**20


def _model_env(args: argparse.Namespace) -> dict[str, str]:
    return {
        "LLM_PROVIDER": "builtin",
        "LLM_BUILTIN_FIRST_TOKEN_MS": str(args.first_token_ms),
        "LLM_BUILTIN_CHUNK_DELAY_MS": str(args.chunk_delay_ms),
        "DEBUG_HEAP_PROFILE": "1",
        "DEBUG_HEAP_PROFILE_FRAMES": str(args.frames),
    }


def _agent(root: Path, url: str, args: argparse.Namespace) -> Process:
    return Process("agent_service", ["-m", "agent_service"], {
        **_model_env(args),
        "AGENT_SERVICE_DATABASE_URL": url,
        "AGENT_SERVICE_API_KEYS": AGENT_KEY,
        "AGENT_SERVICE_MIGRATE_ON_START": "true",
        "AGENT_SERVICE_KNOWLEDGE_DIR": str(root / "knowledge"),
        "AGENT_SERVICE_LOG_LEVEL": args.log_level,
    }, root, start_timeout=args.start_timeout)


def _chat(root: Path, url: str, agent: Process, args: argparse.Namespace) -> Process:
    return Process("conversation_service", ["-m", "conversation_service"], {
        **_model_env(args),
        "CONVERSATION_DATABASE_URL": url,
        "MIGRATE_ON_START": "true",
        "AGENT_SERVICE_URL": agent.url,
        "AGENT_SERVICE_API_KEY": AGENT_KEY,
        "AUTH_JWT_SECRET": JWT_SECRET,
        "LOG_LEVEL": args.log_level,
    }, root, start_timeout=args.start_timeout)


class TurnFailed(Exception):
    pass


@dataclass
class Tally:
    turns: int = 0
    direct: int = 0
    agent: int = 0
    ask_user_cycles: int = 0
    conversations: int = 0
    errors: list[str] = field(default_factory=list)


class ChatClient:
    """One user: a conversation and its WebSocket at a time, replaced every ``turns_per`` turns."""

    def __init__(self, http: httpx.AsyncClient, ws_base: str, turns_per: int, tally: Tally, rng: random.Random):
        self.http = http
        self.ws_base = ws_base
        self.turns_per = turns_per
        self.tally = tally
        self.rng = rng
        token = issue_token(JWT_SECRET, f"leak-{uuid.uuid4().hex[:12]}", "leak", ttl_s=24 * 3600)
        self.headers = {"Authorization": f"Bearer {token}"}
        self.conversation_id: str | None = None
        self.ws: Any = None
        self.used = 0

    async def _open(self) -> None:
        await self.close()
        r = await self.http.post("/conversations", json={"title": "leak check"}, headers=self.headers)
        if r.status_code != 201:
            raise TurnFailed(f"create conversation: {r.status_code}")
        cid = r.json()["id"]
        # 201 can precede the request's commit: wait until a read sees the conversation.
        deadline = time.monotonic() + 10
        while (await self.http.get(f"/conversations/{cid}", headers=self.headers)).status_code != 200:
            if time.monotonic() > deadline:
                raise TurnFailed("new conversation never became visible")
            await asyncio.sleep(0.01)  # polling a read-after-write; there is nothing to wait on
        self.ws = await connect(f"{self.ws_base}/conversations/{cid}/ws", additional_headers=self.headers,
                                max_size=2**22, open_timeout=10)
        self.conversation_id, self.used = cid, 0
        self.tally.conversations += 1

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
            self.ws = None

    async def _until(self, ends: set[str], timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TurnFailed(f"no {sorted(ends)} within {timeout:.0f} s")
            try:
                frame = orjson.loads(await asyncio.wait_for(self.ws.recv(), remaining))
            except TimeoutError:
                raise TurnFailed(f"no {sorted(ends)} within {timeout:.0f} s") from None
            kind = frame["type"]
            if kind in ends:
                return frame
            if kind in ("message.error", "agent.error", "notice"):
                raise TurnFailed(f"{kind}: {frame['data'].get('code')}")

    async def turn(self, timeout: float) -> None:
        if self.ws is None or self.used >= self.turns_per:
            await self._open()
        self.used += 1
        roll = self.rng.random()
        if roll < 0.7:
            content, ends, kind = self.rng.choice(QUESTIONS), {"message.completed"}, "direct"
        elif roll < 0.8:
            content, ends, kind = TRIP_REQUEST, {"agent.ask_user"}, "ask"
        else:
            content, ends, kind = "/agent " + self.rng.choice(QUESTIONS), {"agent.complete"}, "agent"
        r = await self.http.post(f"/conversations/{self.conversation_id}/messages", json={"content": content},
                                 headers=self.headers)
        if r.status_code != 202:
            raise TurnFailed(f"post message: {r.status_code}")
        frame = await self._until(ends, timeout)
        if kind == "ask":
            r = await self.http.post(
                f"/conversations/{self.conversation_id}/agent-answer", headers=self.headers,
                json={"question_id": frame["data"]["question_id"], "answer": TRIP_ANSWER},
            )
            if r.status_code not in (200, 202):
                raise TurnFailed(f"agent answer: {r.status_code}")
            await self._until({"agent.complete"}, timeout)
            self.tally.ask_user_cycles += 1
        if kind == "direct":
            self.tally.direct += 1
        else:
            self.tally.agent += 1
        self.tally.turns += 1


async def _round(clients: list[ChatClient], n: int, timeout: float, tally: Tally) -> None:
    remaining = n

    async def worker(client: ChatClient) -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            try:
                await client.turn(timeout)
            except Exception as exc:  # noqa: BLE001 - every failed turn is counted and reported
                tally.errors.append(f"{type(exc).__name__}: {exc}"[:300])
                await client.close()  # the socket may be unusable: start afresh next turn

    await asyncio.gather(*(worker(c) for c in clients))


def _summary(rounds: list[dict[str, Any]], per_round: int, top: int) -> dict[str, Any]:
    """Growth after the warm-up round (rounds[0] is the measure before any load, rounds[1] after warm-up)."""
    result: dict[str, Any] = {}
    for name in rounds[0]:
        series = [r[name] for r in rounds]
        steady = series[1:]
        traced = [s["traced_bytes"] for s in steady]
        rss = [s["rss"] for s in steady]
        steps = len(steady) - 1
        sites: dict[str, dict[str, Any]] = defaultdict(lambda: {"bytes_diff": 0, "count_diff": 0, "rounds_grown": 0,
                                                                "bytes": 0})
        for s in steady[1:]:
            for g in s["growth"] or []:
                site = sites[g["site"]]
                site["bytes_diff"] += g["bytes_diff"]
                site["count_diff"] += g["count_diff"]
                site["bytes"] = g["bytes"]
                if g["bytes_diff"] > 0:
                    site["rounds_grown"] += 1
        growing = sorted(({"site": k, **v} for k, v in sites.items()), key=lambda d: d["bytes_diff"], reverse=True)
        per_round_bytes = (traced[-1] - traced[0]) / steps if steps else 0.0
        result[name] = {
            "rss_mib": [round(s["rss"] / MIB, 1) for s in series],
            "traced_mib": [round(s["traced_bytes"] / MIB, 2) for s in series],
            "asyncio_tasks": [s["asyncio_tasks"] for s in series],
            "gc_objects": [s["gc_objects"] for s in series],
            "traced_growth_kib_per_round_after_warmup": round(per_round_bytes / 1024, 1),
            "traced_growth_kib_per_1000_requests": round(per_round_bytes / per_round * 1000 / 1024, 1)
            if per_round else None,
            "rss_growth_mib_after_warmup": round((rss[-1] - rss[0]) / MIB, 1),
            "top_growing_sites": growing[:top],
            "top_sites_at_end": series[-1]["top"][:top],
        }
    return result


async def main(args: argparse.Namespace) -> dict[str, Any]:
    root = work_dir("leak")
    (root / "knowledge").mkdir(parents=True, exist_ok=True)
    per_round = args.requests // args.rounds
    results: dict[str, Any] = {
        "benchmark": "leak_check", "machine": machine(), "database": args.db,
        "settings": {"requests": args.requests, "rounds": args.rounds, "per_round": per_round,
                     "concurrency": args.concurrency, "turns_per_conversation": args.turns_per_conversation,
                     "mix": "70% direct / 20% agent / 10% agent with ASK_USER + answer",
                     "first_token_ms": args.first_token_ms, "chunk_delay_ms": args.chunk_delay_ms,
                     "tracemalloc_frames": args.frames},
    }
    tally = Tally()
    rng = random.Random(args.seed)
    async with databases(args.db, ["agent", "chat"], root) as urls:
        agent = _agent(root, urls["agent"], args)
        chat = _chat(root, urls["chat"], agent, args)
        procs = {"agent_service": agent, "conversation_service": chat}
        async with running(agent, chat), httpx.AsyncClient(base_url=chat.url, timeout=30) as http:
            clients = [ChatClient(http, chat.url.replace("http://", "ws://"), args.turns_per_conversation, tally, rng)
                       for _ in range(args.concurrency)]
            rounds = [await read_heaps(http, procs, args.top)]
            started = time.monotonic()
            try:
                for i in range(args.rounds):
                    t0 = time.monotonic()
                    await _round(clients, per_round, args.turn_timeout, tally)
                    rounds.append(await read_heaps(http, procs, args.top))
                    line = "  ".join(
                        f"{n}: rss {m['rss'] / MIB:.1f} MiB traced {m['traced_bytes'] / MIB:.2f} MiB "
                        f"tasks {m['asyncio_tasks']}" for n, m in rounds[-1].items())
                    print(f"round {i + 1}/{args.rounds} ({per_round} turns, {time.monotonic() - t0:.0f} s, "
                          f"errors so far {len(tally.errors)})  {line}", flush=True)
            finally:
                for client in clients:
                    await client.close()
            results["wall_seconds"] = round(time.monotonic() - started, 1)
    results["turns"] = {"completed": tally.turns, "direct": tally.direct, "agent": tally.agent,
                        "ask_user_cycles": tally.ask_user_cycles, "conversations": tally.conversations,
                        "errors": len(tally.errors), "error_samples": tally.errors[:20]}
    results["memory"] = _summary(rounds, per_round, args.top)
    results["rounds"] = rounds
    results["logs"] = str(root)
    print(f"turns {results['turns']}")
    for name, mem in results["memory"].items():
        print(f"\n{name}: rss {mem['rss_mib']} MiB, traced {mem['traced_mib']} MiB, tasks {mem['asyncio_tasks']}")
        print(f"  traced growth after warm-up: {mem['traced_growth_kib_per_round_after_warmup']} KiB/round, "
              f"{mem['traced_growth_kib_per_1000_requests']} KiB per 1000 requests; "
              f"RSS {mem['rss_growth_mib_after_warmup']:+} MiB")
        for site in mem["top_growing_sites"][:10]:
            print(f"  {site['bytes_diff'] / 1024:+9.1f} KiB {site['count_diff']:+7} objs "
                  f"(grew in {site['rounds_grown']} rounds) {site['site']}")
    return results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--requests", type=int, default=1000, help="chat turns in all (an ASK_USER cycle is one)")
    parser.add_argument("--rounds", type=int, default=6, help="the first is warm-up")
    parser.add_argument("--concurrency", type=int, default=8, help="chat clients at once")
    parser.add_argument("--turns-per-conversation", type=int, default=5)
    parser.add_argument("--turn-timeout", type=float, default=60.0)
    parser.add_argument("--first-token-ms", type=int, default=20)
    parser.add_argument("--chunk-delay-ms", type=int, default=2)
    parser.add_argument("--frames", type=int, default=1, help="tracemalloc frames per allocation site")
    parser.add_argument("--top", type=int, default=40, help="allocation sites per report")
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("--start-timeout", type=float, default=300.0,
                        help="seconds each service has to start (traced, it starts several times slower)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.rounds < 3 or args.requests < args.rounds:
        parser.error("need at least 3 rounds (warm-up, then two to compare) and a request per round")
    if args.out is None:
        args.out = REPO_ROOT / "loadtests" / "results" / f"leak-{args.db}-{args.requests}.json"
    return args


if __name__ == "__main__":
    arguments = parse_args()
    write_results(arguments.out, asyncio.run(main(arguments)))
