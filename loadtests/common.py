"""What the benchmarks share: the product's processes on loopback, throwaway databases, Prometheus
histograms read back from ``/metrics``, percentiles, the machine description and JSON results.

Every figure a benchmark prints comes from one of two places: timestamps taken by the benchmark
client itself (end-to-end latencies, throughput) or the services' own histograms, read before and
after a phase so that only that phase's observations count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

REPO_ROOT = Path(__file__).resolve().parents[1]
POSTGRES_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
AGENT_KEY = "bench-agent-key-0123456789abcdef"
JWT_SECRET = "bench-jwt-secret-0123456789abcdef-0123456789"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- processes ---------------------------------------------------------------------------------


@dataclass
class Process:
    """One child process serving HTTP on 127.0.0.1 (stdout and stderr to a log file)."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_dir: Path
    port: int = field(default_factory=free_port)
    popen: subprocess.Popen | None = None
    # Seconds it has to answer its health check. On a shared 2-core machine the migrations alone took
    # over a minute; tracing every allocation (leak_check) makes the start-up slower again.
    start_timeout: float = 180.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.name}.log"

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def rss(self) -> int:
        """Resident set size of the process and its workers (``--workers N``), in bytes."""
        root = psutil.Process(self.pid)
        total = root.memory_info().rss
        for child in root.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return total

    def _spawn(self) -> None:
        with open(self.log_path, "wb") as log:
            self.popen = subprocess.Popen(
                [sys.executable, *self.argv, "--host", "127.0.0.1", "--port", str(self.port)],
                env={**os.environ, **self.env, "PYTHONUNBUFFERED": "1"}, cwd=REPO_ROOT,
                stdout=log, stderr=subprocess.STDOUT,
            )

    async def start(self, health_path: str = "/health") -> None:
        self._spawn()  # a fork and an open file, once per benchmark: not worth a thread
        assert self.popen is not None
        deadline = time.monotonic() + self.start_timeout
        async with httpx.AsyncClient() as client:
            while time.monotonic() < deadline:
                if self.popen.poll() is not None:
                    raise RuntimeError(f"{self.name} exited early:\n{self.log_path.read_text()[-4000:]}")
                try:
                    if (await client.get(self.url + health_path, timeout=1.0)).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.05)  # polling a child process for readiness; nothing to wait on
        raise TimeoutError(f"{self.name} did not become healthy:\n{self.log_path.read_text()[-4000:]}")

    async def stop(self) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.to_thread(self.popen.wait), 20)
        except TimeoutError:
            self.popen.kill()
            self.popen.wait()


def fake_llm(
    log_dir: Path, *, tokens: int, ttft_ms: float, token_delay_ms: float, name: str = "fake_llm", stamp: bool = False,
    tool_steps: int = 0,
) -> Process:
    """The fake model; ``stamp``: each token's text is the time it was sent (``t<time.time()>``);
    ``tool_steps``: each run calls the calculator that many times (one model turn each) before its answer."""
    return Process(
        name, ["-m", "tests.support.fake_openai", "--tokens", str(tokens), "--ttft-ms", str(ttft_ms),
               "--token-delay-ms", str(token_delay_ms), *(["--stamp"] if stamp else []),
               *(["--tool-steps", str(tool_steps)] if tool_steps else [])], {}, log_dir,
    )


def workers_args(workers: int) -> list[str]:
    """``--workers N`` for a service's ``__main__``, only when more than one process is asked for."""
    return ["--workers", str(workers)] if workers > 1 else []


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and every living descendant (a service's workers are
    its children). A child that ended since the last reading is missed: compare readings of the
    same, steady process tree."""
    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def llm_env(llm: Process) -> dict[str, str]:
    return {
        "LLM_PROVIDER": "openai", "LLM_BASE_URL": f"{llm.url}/v1", "LLM_MODEL": "fake-model",
        "LLM_API_KEY": "sk-bench",
    }


def agent_process(
    log_dir: Path, llm: Process, database_url: str, log_level: str, name: str = "agent_service", workers: int = 1,
    extra_env: dict[str, str] | None = None,
) -> Process:
    return Process(
        name, ["-m", "agent_service", *workers_args(workers)],
        {
            **(extra_env or {}),
            **llm_env(llm),
            "AGENT_SERVICE_DATABASE_URL": database_url,
            "AGENT_SERVICE_API_KEYS": AGENT_KEY,
            "AGENT_SERVICE_MIGRATE_ON_START": "true",
            # An empty knowledge folder: start-up does not index the project's documents.
            "AGENT_SERVICE_KNOWLEDGE_DIR": str(log_dir / "knowledge"),
            "AGENT_SERVICE_LOG_LEVEL": log_level,
        },
        log_dir,
    )


def conversation_process(
    log_dir: Path, llm: Process, agent: Process, database_url: str, log_level: str, workers: int = 1,
    redis_url: str | None = None, name: str = "conversation_service", extra_env: dict[str, str] | None = None,
) -> Process:
    return Process(
        name, ["-m", "conversation_service", *workers_args(workers)],
        {
            **(extra_env or {}),
            **({"REDIS_URL": redis_url} if redis_url else {}),
            **llm_env(llm),
            "CONVERSATION_DATABASE_URL": database_url,
            "MIGRATE_ON_START": "true",
            "AGENT_SERVICE_URL": agent.url,
            "AGENT_SERVICE_API_KEY": AGENT_KEY,
            "AUTH_JWT_SECRET": JWT_SECRET,
            "LOG_LEVEL": log_level,
        },
        log_dir,
    )


@asynccontextmanager
async def running(*processes: Process) -> AsyncIterator[None]:
    """Start ``processes`` in order (each healthy before the next), stop them in reverse."""
    started: list[Process] = []
    try:
        for proc in processes:
            (proc.log_dir / "knowledge").mkdir(parents=True, exist_ok=True)
            await proc.start()
            started.append(proc)
        yield
    finally:
        for proc in reversed(started):
            await proc.stop()


def work_dir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"{prefix}-"))


# --- databases ---------------------------------------------------------------------------------


@asynccontextmanager
async def databases(kind: str, names: Iterable[str], root: Path) -> AsyncIterator[dict[str, str]]:
    """One fresh database per name: SQLite files under ``root``, or throwaway PostgreSQL databases
    (created here, dropped afterwards)."""
    names = list(names)
    if kind == "sqlite":
        yield {n: f"sqlite+aiosqlite:///{root / f'{n}.db'}" for n in names}
        return
    import asyncpg

    created = {n: f"bench_{n}_{uuid.uuid4().hex[:8]}" for n in names}
    admin = await asyncpg.connect(POSTGRES_ADMIN_URL)
    try:
        for db in created.values():
            await admin.execute(f'CREATE DATABASE "{db}"')
    finally:
        await admin.close()
    try:
        yield {n: f"postgresql+asyncpg://postgres@127.0.0.1:5432/{db}" for n, db in created.items()}
    finally:
        admin = await asyncpg.connect(POSTGRES_ADMIN_URL)
        try:
            for db in created.values():
                await admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        finally:
            await admin.close()


REDIS_BASE = "redis://127.0.0.1:6379"


async def fresh_redis_db() -> int:
    """An empty Redis database number (1-14; 15 is the test suite's), flushed for this run."""
    import redis.asyncio as redis

    for db in range(14, 0, -1):
        client = redis.Redis.from_url(f"{REDIS_BASE}/{db}")
        try:
            if await client.dbsize() == 0:
                await client.flushdb()
                await client.set("loadtests:taken", 1)  # not empty now: the next caller takes another
                return db
        finally:
            await client.aclose()
    raise RuntimeError("no empty Redis database among 1-14")


async def flush_redis_db(db: int) -> None:
    import redis.asyncio as redis

    client = redis.Redis.from_url(f"{REDIS_BASE}/{db}")
    try:
        await client.flushdb()
    finally:
        await client.aclose()


# --- the product -------------------------------------------------------------------------------


@dataclass
class Product:
    """The processes of a benchmark run, healthy (``running_product``)."""

    llm: Process
    agent: Process
    chat: Process | None  # None: the Agent Service alone
    redis_url: str | None  # the ConversationService's workers fan frames out through it


@asynccontextmanager
async def running_product(
    args: argparse.Namespace, root: Path, *, chat: bool = True, workers: int = 1, stamp: bool = False,
    agent_env: dict[str, str] | None = None, service_env: dict[str, str] | None = None,
    llm: Process | None = None, suffix: str = "",
) -> AsyncIterator[Product]:
    """The fake model, the Agent Service and (``chat``) the ConversationService on fresh databases.

    ``args`` holds the benchmarks' common options: ``db``, the model's pace (``tokens``,
    ``ttft_ms``, ``token_delay_ms``) and the services' ``log_level``. Each service runs ``workers``
    processes; with more than one, the ConversationService's workers share a fresh Redis database,
    flushed afterwards. ``stamp``: see ``fake_llm``; ``agent_env``: more Agent Service settings;
    ``service_env``: settings of both services. ``llm``: a fake model already running, shared with
    other products (``suffix`` then tells their databases and logs apart). Everything started here
    is stopped and dropped on exit.
    """
    redis_db = await fresh_redis_db() if chat and workers > 1 else None
    redis_url = None if redis_db is None else f"{REDIS_BASE}/{redis_db}"
    names = [f"agent{suffix}", f"chat{suffix}"] if chat else [f"agent{suffix}"]
    try:
        async with databases(args.db, names, root) as urls:
            processes = []
            if llm is None:
                llm = fake_llm(root, tokens=args.tokens, ttft_ms=args.ttft_ms, token_delay_ms=args.token_delay_ms,
                               stamp=stamp)
                processes.append(llm)
            agent = agent_process(root, llm, urls[f"agent{suffix}"], args.log_level, name=f"agent_service{suffix}",
                                  workers=workers, extra_env={**(service_env or {}), **(agent_env or {})})
            processes.append(agent)
            chat_service = None
            if chat:
                chat_service = conversation_process(
                    root, llm, agent, urls[f"chat{suffix}"], args.log_level, workers=workers, redis_url=redis_url,
                    name=f"conversation_service{suffix}", extra_env=service_env)
                processes.append(chat_service)
            async with running(*processes):
                yield Product(llm, agent, chat_service, redis_url)
    finally:
        if redis_db is not None:
            await flush_redis_db(redis_db)


# --- Prometheus histograms ---------------------------------------------------------------------


@dataclass
class Histogram:
    """Cumulative bucket counts (upper bound -> count), as exposed."""

    buckets: dict[float, float] = field(default_factory=dict)
    count: float = 0.0
    total: float = 0.0

    def __sub__(self, other: Histogram) -> Histogram:
        return Histogram(
            {le: c - other.buckets.get(le, 0.0) for le, c in self.buckets.items()},
            self.count - other.count, self.total - other.total,
        )

    def __add__(self, other: Histogram) -> Histogram:
        les = set(self.buckets) | set(other.buckets)
        return Histogram(
            {le: self.buckets.get(le, 0.0) + other.buckets.get(le, 0.0) for le in les},
            self.count + other.count, self.total + other.total,
        )

    def quantile(self, q: float) -> float | None:
        """Like PromQL's ``histogram_quantile``: linear interpolation inside the bucket that holds
        the q-th observation. Only as precise as the buckets; None without observations."""
        if self.count <= 0:
            return None
        rank = q * self.count
        lower, below = 0.0, 0.0
        for le in sorted(self.buckets):
            cumulative = self.buckets[le]
            if cumulative >= rank:
                if math.isinf(le):
                    return lower  # beyond the last finite bound: the best known lower bound
                inside = cumulative - below
                return lower + (le - lower) * ((rank - below) / inside if inside else 1.0)
            lower, below = le, cumulative
        return lower

    def share_at_most(self, bound: float) -> float | None:
        """Fraction of observations <= ``bound`` (``bound`` must be a bucket edge)."""
        if self.count <= 0:
            return None
        return self.buckets[bound] / self.count

    def summary(self) -> dict[str, Any]:
        def ms(v: float | None) -> float | None:
            return None if v is None else round(v * 1000, 4)

        return {
            "count": int(self.count),
            "mean_ms": ms(self.total / self.count) if self.count else None,
            "p50_ms": ms(self.quantile(0.50)), "p95_ms": ms(self.quantile(0.95)), "p99_ms": ms(self.quantile(0.99)),
        }


Snapshot = dict[tuple[str, tuple[tuple[str, str], ...]], Histogram]


def parse_histograms(text: str) -> Snapshot:
    out: Snapshot = {}
    for family in text_string_to_metric_families(text):
        if family.type != "histogram":
            continue
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
            hist = out.setdefault((family.name, labels), Histogram())
            if sample.name.endswith("_bucket"):
                hist.buckets[float(sample.labels["le"])] = sample.value
            elif sample.name.endswith("_count"):
                hist.count = sample.value
            elif sample.name.endswith("_sum"):
                hist.total = sample.value
    return out


async def read_heaps(http: httpx.AsyncClient, procs: dict[str, Process], top: int) -> dict[str, Any]:
    """``GET /debug/heap`` of each service (``DEBUG_HEAP_PROFILE=1``), with its RSS in bytes."""
    out: dict[str, Any] = {}
    for name, proc in procs.items():
        r = await http.get(f"{proc.url}/debug/heap", params={"top": top}, timeout=300)
        r.raise_for_status()
        out[name] = {"rss": proc.rss(), **r.json()}
    return out


async def scrape(client: httpx.AsyncClient, base_url: str) -> Snapshot:
    response = await client.get(f"{base_url}/metrics")
    response.raise_for_status()
    return parse_histograms(response.text)


def histogram_delta(before: Snapshot, after: Snapshot, name: str, **labels: str) -> Histogram:
    """Observations of ``name`` between two scrapes, summed over the label sets matching ``labels``."""
    result = Histogram()
    for (family, label_set), hist in after.items():
        if family != name or any(dict(label_set).get(k) != v for k, v in labels.items()):
            continue
        result = result + (hist - before.get((family, label_set), Histogram()))
    return result


# --- client-side samples -----------------------------------------------------------------------


def percentile(samples: list[float], q: float) -> float:
    """Nearest-rank-with-interpolation percentile (numpy's default 'linear' method)."""
    ordered = sorted(samples)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize_seconds(samples: list[float]) -> dict[str, Any]:
    if not samples:
        return {"count": 0}
    return {
        "count": len(samples),
        "mean_ms": round(statistics.fmean(samples) * 1000, 3),
        "p50_ms": round(percentile(samples, 0.50) * 1000, 3),
        "p95_ms": round(percentile(samples, 0.95) * 1000, 3),
        "p99_ms": round(percentile(samples, 0.99) * 1000, 3),
        "max_ms": round(max(samples) * 1000, 3),
    }


# --- reporting ---------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    cpu_model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": cpu_model,
        "memory_total_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_1m_at_start": round(os.getloadavg()[0], 2),
    }


def write_results(path: Path, results: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")
    print(f"\nresults written to {path}")


def verdict(value: float | None, limit: float) -> str:
    if value is None:
        return "no data"
    return "MET" if value <= limit else "MISSED"


# --- tokens: model speeds, coalescing, cost per 1,000 tokens -----------------------------------
#
# A stream's cost is counted per token the client received, whatever the events that carried
# them: with STREAM_COALESCE_MS a chunk holds every token that arrived within the budget. The fake
# model stamps each token with the time it sent it (``--stamp``); the clients (``capacity_client``)
# time each token from that stamp to its arrival, and read the model's real pace from the stamps.

COALESCE_SETTING = "STREAM_COALESCE_MS"  # read by both services from the environment at start


def comma_list(text: str, kind: type = float, minimum: float = 0) -> list:
    """``"50,500,2000"`` -> ``[50.0, 500.0, 2000.0]``: an argparse type for values of ``kind`` (float
    or int) of at least ``minimum``, separated by commas."""
    what = "whole numbers" if kind is int else "numbers"
    try:
        values = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} separated by commas: {text!r}") from None
    if not values or any(v < minimum for v in values):
        raise argparse.ArgumentTypeError(f"{what} >= {minimum:g} separated by commas: {text!r}")
    return values


def number_list(text: str) -> list[float]:
    """Numbers >= 0 separated by commas (speeds, budgets)."""
    return comma_list(text)


def add_speed_options(parser: argparse.ArgumentParser, *, coalesce_default: str | None = "0,25") -> None:
    """The options of a run over model speeds, each with coalescing off and on and the bare relay."""
    group = parser.add_argument_group("model speeds: CPU per 1,000 tokens and the added latency per token")
    group.add_argument("--speeds", type=number_list, default=None,
                       help="model tokens/s per stream, e.g. 50,500,2000 (20, 2, 0.5 ms a token)")
    group.add_argument("--coalesce-ms", type=number_list,
                       default=None if coalesce_default is None else number_list(coalesce_default),
                       help=f"{COALESCE_SETTING} values, e.g. 0,25 (0: one event per delta); one service process "
                            "(and chat) per value, all running together")
    group.add_argument("--stream-s", type=float, default=4.0,
                       help="how long each stream lasts at the model's pace: speed x this many tokens")
    group.add_argument("--load", type=float, default=2000.0,
                       help="model tokens/s of all the streams of a cell together: max(1, round(load / speed)) "
                            "streams")
    group.add_argument("--cell-rounds", type=int, default=3,
                       help="each cell runs this many times; the cells alternate within each speed")
    group.add_argument("--no-floor", dest="floor", action="store_false",
                       help="leave out the bare relay (loadtests.floor_relay), which forwards every delta")
    group.add_argument("--clients", type=int, default=2, help="client processes the streams are spread over")
    group.add_argument("--model-write-ms", type=float, default=1.0,
                       help="how often the fake model writes to a stream, every token due in one write (1 ms: two "
                            "tokens a write at 2,000 tokens/s)")
    group.add_argument("--profile-cells", type=Path, default=None, metavar="DIR",
                       help="a py-spy profile (raw collapsed stacks) of each cell's service, or the relay, during its "
                            "first round: DIR/<speed>-<cell>.txt")


@dataclass(frozen=True)
class Pace:
    """The fake model's reply: ``tokens`` tokens at ``speed`` tokens/s after ``ttft_ms``."""

    speed: float
    tokens: int
    ttft_ms: float
    write_every_ms: float = 1.0

    @property
    def delay_ms(self) -> float:
        return 1000 / self.speed

    @property
    def seconds(self) -> float:
        return self.ttft_ms / 1000 + self.tokens / self.speed


def streams_for(speed: float, load: float) -> int:
    """Streams that together ask ``load`` tokens/s of a model streaming ``speed`` tokens/s each."""
    return max(1, round(load / speed))


async def set_pace(http: httpx.AsyncClient, llm: Process, pace: Pace) -> None:
    """The pace of the fake model's next replies (``POST /pace``)."""
    r = await http.post(f"{llm.url}/pace", json={"tokens": pace.tokens, "ttft_ms": pace.ttft_ms,
                                                  "token_delay_ms": pace.delay_ms, "write_every_ms": pace.write_every_ms})
    r.raise_for_status()


def _ms(samples: Iterable[float], *qs: float) -> dict[str, float | None]:
    ordered = list(samples)
    return {f"p{round(q * 100)}": round(percentile(ordered, q) * 1000, 2) if ordered else None for q in qs}


def token_figures(share: Any, cpu: dict[str, float], wall: float) -> dict[str, Any]:
    """A level's or a cell's figures per token: ``share`` is the clients' merged ``Share``, ``cpu``
    the CPU seconds of each process over it, ``wall`` its length in seconds.

    Latency: a token's arrival at the client minus the model's stamp, so whatever held it on the way
    (a coalescing budget included). First token: the same for each stream's first token; first
    answer: the request sent -> its first token, the model's own time to first token included."""
    tokens = len(share.latencies)
    rates = sorted(share.model_rates)
    errors = sum(share.errors.values())
    return {
        "streams": share.streams, "completed": share.completed, "errors": errors, "error_reasons": dict(share.errors),
        "tokens": tokens, "events": share.events,
        "events_per_1k_tokens": round(share.events / tokens * 1000, 1) if tokens else None,
        "wall_s": round(wall, 2), "tokens_per_s": round(tokens / wall, 1) if wall else None,
        # The model's real pace per stream, from its stamps: a fake that fell behind shows here.
        "model_tokens_per_s": {"p50": round(percentile(rates, 0.5), 1), "min": round(rates[0], 1)} if rates else None,
        "latency_ms": {**_ms(share.latencies, 0.5, 0.95, 0.99),
                       "max": round(max(share.latencies) * 1000, 2) if tokens else None},
        "first_token_ms": _ms(share.first_token, 0.5, 0.95),
        "first_answer_ms": _ms(share.first_answer, 0.5, 0.95),
        "cpu_s": {k: round(v, 3) for k, v in cpu.items()},
        "cpu_ms_per_1k_tokens": {k: round(v / tokens * 1e6, 2) if tokens else None for k, v in cpu.items()},
        # Cores each process kept busy; the load average says how much else the host was running.
        "cpu_cores": {k: round(v / wall, 2) if wall else None for k, v in cpu.items()},
        "load_average_1m_after": round(os.getloadavg()[0], 2),
    }


async def run_streams(clients: Any, specs: list[Any], procs: dict[str, Process]) -> dict[str, Any]:
    """Run one level of streams over ``clients`` (``capacity_client.Clients``), reading the CPU time of
    ``procs`` and of the clients from the moment every stream is set up to the end of the last."""
    before: dict[str, float] = {}
    started = 0.0

    def go() -> None:
        nonlocal started
        before.update({name: tree_cpu_seconds(p.pid) for name, p in procs.items()}, client=clients.cpu_seconds())
        started = time.perf_counter()

    share = await clients.run(specs, go)
    wall = time.perf_counter() - started
    cpu = {name: tree_cpu_seconds(p.pid) - before[name] for name, p in procs.items()}
    cpu["client"] = clients.cpu_seconds() - before["client"]
    return token_figures(share, cpu, wall)


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


@dataclass(frozen=True)
class Cell:
    """What serves a cell's streams: the Agent Service (``agent``), the chat in front of it (``chat``)
    or the bare relay (``floor``), with ``coalesce_ms`` (None: the service's own default)."""

    kind: str
    coalesce_ms: float | None = None

    @property
    def name(self) -> str:
        return self.kind if self.coalesce_ms is None else f"{self.kind}/c{self.coalesce_ms:g}"


@dataclass
class Rig:
    """One stamped fake model, the bare relay and one product per coalescing value, all running."""

    llm: Process
    relay: Process | None
    products: dict[float | None, Product]

    def procs(self, cell: Cell) -> dict[str, Process]:
        """The processes whose CPU a cell counts (the fake model's too: it shows the model kept up)."""
        if cell.kind == "floor":
            assert self.relay is not None
            return {"floor_relay": self.relay, "fake_model": self.llm}
        product = self.products[cell.coalesce_ms]
        chat = {"conversation_service": product.chat} if cell.kind == "chat" and product.chat else {}
        return {**chat, "agent_service": product.agent, "fake_model": self.llm}

    def url(self, cell: Cell) -> str:
        """Where the cell's client sends its streams."""
        if cell.kind == "floor":
            assert self.relay is not None
            return self.relay.url
        product = self.products[cell.coalesce_ms]
        if cell.kind == "chat":
            assert product.chat is not None
            return product.chat.url
        return product.agent.url


@asynccontextmanager
async def running_rig(
    args: argparse.Namespace, root: Path, *, kinds: list[str], coalesce: list[float | None], floor: bool,
    workers: int = 1, agent_env: dict[str, str] | None = None,
) -> AsyncIterator[Rig]:
    """The stamped fake model (one for everything, paced by ``set_pace``), the bare relay if ``floor``,
    and for each value of ``coalesce`` an Agent Service (and, if ``chat`` is in ``kinds``, a
    ConversationService) started with ``STREAM_COALESCE_MS`` at that value, on fresh databases."""
    llm = fake_llm(root, tokens=args.tokens, ttft_ms=args.ttft_ms, token_delay_ms=args.token_delay_ms or 20.0,
                   stamp=True)
    relay = Process("floor_relay", ["-m", "loadtests.floor_relay", "--model", llm.url, "--workers", str(workers)],
                    {}, root) if floor else None
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(running(*[p for p in (llm, relay) if p is not None]))
        products = {}
        for ms in coalesce if kinds else []:
            env = {} if ms is None else {COALESCE_SETTING: f"{ms:g}"}
            products[ms] = await stack.enter_async_context(running_product(
                args, root, chat="chat" in kinds, workers=workers, agent_env=agent_env, service_env=env, llm=llm,
                suffix="" if ms is None else f"_c{ms:g}"))
        yield Rig(llm, relay, products)


def level_specs(cell: Cell, rig: Rig, pace: Pace, streams: int, clients: int, name: str,
                stream_timeout_s: float = 60.0) -> list[Any]:
    """Each client process's share of ``streams`` streams of ``cell`` (the relay answers the Agent
    Service's execute request with the same kind of SSE stream)."""
    from loadtests.capacity_client import LevelSpec, split

    url = rig.url(cell)
    kind = "chat" if cell.kind == "chat" else "agent"
    return [LevelSpec(target=kind, streams=k, tokens=pace.tokens, timeout_s=pace.seconds + stream_timeout_s,
                      agent_url=url, agent_key=AGENT_KEY, chat_url=url if kind == "chat" else "",
                      jwt_secret=JWT_SECRET, name=f"{name}-{i}")
            for i, k in enumerate(split(streams, clients))]


def py_spy(pid: int, out: Path) -> subprocess.Popen:
    """``py-spy record`` of ``pid`` until sent SIGINT (then it writes ``out``): every thread's samples
    off the CPU's idle waits, 200 a second, the process not paused to take them."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([exe, "record", "--pid", str(pid), "--format", "raw", "--rate", "200", "--nonblocking",
                             "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def speed_paces(args: argparse.Namespace) -> list[Pace]:
    if any(speed <= 0 for speed in args.speeds) or args.stream_s <= 0:
        raise SystemExit("--speeds and --stream-s must be positive")
    write = getattr(args, "model_write_ms", 1.0)
    return [Pace(speed, max(1, round(speed * args.stream_s)), args.ttft_ms, write) for speed in args.speeds]


async def speed_matrix(args: argparse.Namespace, kind: str | None) -> dict[str, Any]:
    """Every model speed of ``args.speeds`` with each coalescing value of ``args.coalesce_ms`` (the
    ``kind`` of service: ``agent`` or ``chat``; None: the relay alone) and the bare relay, each cell
    ``args.cell_rounds`` times, the cells alternating within a speed (their order reversed every
    other round) so that the machine's load falls on all of them alike."""
    from loadtests.capacity_client import Clients

    root = work_dir(f"bench-speeds-{kind or 'floor'}")
    coalesce = list(args.coalesce_ms or [None]) if kind else []
    cells = [Cell(kind, ms) for ms in coalesce] + ([Cell("floor")] if args.floor else [])
    paces = speed_paces(args)
    rows: list[dict[str, Any]] = []
    clients = Clients(args.clients)
    try:
        async with running_rig(args, root, kinds=[kind] if kind else [], coalesce=coalesce,
                               floor=args.floor) as rig, httpx.AsyncClient(timeout=30) as http:
            print(f"{'speed':>6} {'cell':10} {'N':>3} {'tokens':>7} {'ev/1k':>6} {'model t/s':>9} {'p50':>7} {'p95':>7} "
                  f"{'p99':>7} {'1st p95':>7} {'ttft p50':>8}  CPU ms per 1,000 tokens   load", flush=True)
            # Warm-up, not counted: imports, pools and caches of each process. Twice: the first runs'
            # recall finds no memories, the second's does, and only then is the tokenizer paged in.
            warm = Pace(paces[0].speed, min(paces[0].tokens, 20), args.ttft_ms, paces[0].write_every_ms)
            await set_pace(http, rig.llm, warm)
            for w in range(2):
                for cell in cells:
                    await run_streams(clients, level_specs(cell, rig, warm, 4, len(clients.procs),
                                                           f"warm{w}-{cell.name}"), rig.procs(cell))
            for pace in paces:
                await set_pace(http, rig.llm, pace)
                n = streams_for(pace.speed, args.load)
                for r in range(args.cell_rounds):
                    for cell in cells if r % 2 == 0 else cells[::-1]:
                        specs = level_specs(cell, rig, pace, n, len(clients.procs), f"{cell.name}-{pace.speed:g}-{r}")
                        spy = None
                        if args.profile_cells is not None and r == 0:
                            service = next(iter(rig.procs(cell).values()))  # the chat's, else the agent's or relay's
                            spy = py_spy(service.pid, args.profile_cells / f"{pace.speed:g}-{cell.name.replace('/', '-')}.txt")
                        try:
                            row = {"speed": pace.speed, "cell": cell.name, "round": r, "tokens_per_stream": pace.tokens,
                                   **await run_streams(clients, specs, rig.procs(cell))}
                        finally:
                            if spy is not None:
                                spy.send_signal(signal.SIGINT)  # py-spy writes what it recorded
                                await asyncio.to_thread(spy.wait, 30)
                        rows.append(row)
                        _print_token_row(row)
                        await settle(http, None if cell.kind == "floor" else rig.products[cell.coalesce_ms].agent, 1.0)
    finally:
        clients.close()
    summary = summarize_cells(rows)
    return {"machine": machine(), "database": args.db if kind else None,
            "settings": {"speeds": args.speeds, "coalesce_ms": args.coalesce_ms, "stream_s": args.stream_s,
                         "load_tokens_per_s": args.load, "cell_rounds": args.cell_rounds, "ttft_ms": args.ttft_ms,
                         "clients": args.clients, "floor": args.floor, "model_write_ms": args.model_write_ms},
            "summary": summary, "targets": speed_targets(summary, kind), "cells": rows, "logs": str(root)}


def _print_token_row(row: dict[str, Any]) -> None:
    lat, rate = row["latency_ms"], row["model_tokens_per_s"] or {}
    cpu = "  ".join(f"{k} {v}" for k, v in row["cpu_ms_per_1k_tokens"].items())
    failed = f"  ERRORS {row['error_reasons']}" if row["errors"] else ""
    print(f"{row['speed']:6g} {row['cell']:10} {row['streams']:3} {row['tokens']:7} {row['events_per_1k_tokens'] or 0:6.0f} "
          f"{rate.get('p50') or 0:9.0f} {lat['p50'] or 0:7.1f} {lat['p95'] or 0:7.1f} {lat['p99'] or 0:7.1f} "
          f"{row['first_token_ms']['p95'] or 0:7.1f} {row['first_answer_ms']['p50'] or 0:8.1f}  {cpu}   "
          f"{row['load_average_1m_after']}{failed}", flush=True)


def summarize_cells(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per speed and cell, the median over its rounds of each figure (and the rounds' CPU, to show
    their spread): ``{"2000": {"agent/c25": {...}}}``."""
    grouped: dict[tuple[float, str], list[dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault((row["speed"], row["cell"]), []).append(row)
    out: dict[str, dict[str, Any]] = {}
    for (speed, cell), group in grouped.items():
        def med(get, group=group) -> float | None:
            values = [v for v in (get(r) for r in group) if v is not None]
            return round(statistics.median(values), 2) if values else None

        procs = group[0]["cpu_ms_per_1k_tokens"]
        out.setdefault(f"{speed:g}", {})[cell] = {
            "rounds": len(group), "errors": sum(r["errors"] for r in group),
            "cpu_ms_per_1k_tokens": {p: med(lambda r, p=p: r["cpu_ms_per_1k_tokens"][p]) for p in procs},
            "cpu_ms_per_1k_tokens_rounds": {p: [r["cpu_ms_per_1k_tokens"][p] for r in group] for p in procs},
            "events_per_1k_tokens": med(lambda r: r["events_per_1k_tokens"]),
            "model_tokens_per_s_p50": med(lambda r: (r["model_tokens_per_s"] or {}).get("p50")),
            "latency_ms": {q: med(lambda r, q=q: r["latency_ms"][q]) for q in ("p50", "p95", "p99")},
            "first_token_ms": {q: med(lambda r, q=q: r["first_token_ms"][q]) for q in ("p50", "p95")},
            "first_answer_ms": {q: med(lambda r, q=q: r["first_answer_ms"][q]) for q in ("p50", "p95")},
            "load_average_1m": [r["load_average_1m_after"] for r in group],
        }
    return out


def speed_targets(summary: dict[str, dict[str, Any]], kind: str | None) -> dict[str, Any]:
    """The issue's targets read off a summary: at the fastest speed, CPU per 1,000 tokens at least 10x
    below coalescing off and below the relay's; at the slowest, at most 1.5x (agent) or 2x (chat)
    the relay's; at every speed, the per-token p95 at most the budget + 10 ms."""
    if kind is None or not summary:
        return {}
    proc = "conversation_service" if kind == "chat" else "agent_service"
    speeds = sorted(summary, key=float)
    out: dict[str, Any] = {}

    def cpu(speed: str, cell: str) -> float | None:
        row = summary[speed].get(cell)
        return None if row is None else row["cpu_ms_per_1k_tokens"].get("floor_relay" if cell == "floor" else proc)

    on_cells = [c for c in summary[speeds[0]] if c.startswith(f"{kind}/c") and c != f"{kind}/c0"]
    fast, slow = speeds[-1], speeds[0]
    for cell in on_cells:
        off, on, relay = cpu(fast, f"{kind}/c0"), cpu(fast, cell), cpu(fast, "floor")
        if off and on:
            out[f"{cell} at {fast} tokens/s: >= 10x below coalescing off"] = {
                "off_over_on": round(off / on, 1), "verdict": "MET" if off / on >= 10 else "MISSED"}
        if on and relay:
            out[f"{cell} at {fast} tokens/s: below the relay"] = {
                "on_over_relay": round(on / relay, 2), "verdict": "MET" if on < relay else "MISSED"}
        on, relay = cpu(slow, cell), cpu(slow, "floor")
        limit = 2.0 if kind == "chat" else 1.5
        if on and relay:
            out[f"{cell} at {slow} tokens/s: <= {limit}x the relay"] = {
                "on_over_relay": round(on / relay, 2), "verdict": "MET" if on / relay <= limit else "MISSED"}
        budget = float(cell.rsplit("/c", 1)[1]) + 10
        worst = max((summary[s][cell]["latency_ms"]["p95"] or math.inf) for s in speeds if cell in summary[s])
        out[f"{cell}: per-token p95 <= {budget:g} ms at every speed"] = {
            "worst_p95_ms": worst, "verdict": "MET" if worst <= budget else "MISSED"}
    return out
