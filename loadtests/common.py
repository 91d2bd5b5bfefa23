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
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
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
    redis_url: str | None = None,
) -> Process:
    return Process(
        "conversation_service", ["-m", "conversation_service", *workers_args(workers)],
        {
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
    agent_env: dict[str, str] | None = None,
) -> AsyncIterator[Product]:
    """The fake model, the Agent Service and (``chat``) the ConversationService on fresh databases.

    ``args`` holds the benchmarks' common options: ``db``, the model's pace (``tokens``,
    ``ttft_ms``, ``token_delay_ms``) and the services' ``log_level``. Each service runs ``workers``
    processes; with more than one, the ConversationService's workers share a fresh Redis database,
    flushed afterwards. ``stamp``: see ``fake_llm``; ``agent_env``: more Agent Service settings.
    Everything is stopped and dropped on exit.
    """
    redis_db = await fresh_redis_db() if chat and workers > 1 else None
    redis_url = None if redis_db is None else f"{REDIS_BASE}/{redis_db}"
    try:
        async with databases(args.db, ["agent", "chat"] if chat else ["agent"], root) as urls:
            llm = fake_llm(root, tokens=args.tokens, ttft_ms=args.ttft_ms, token_delay_ms=args.token_delay_ms,
                           stamp=stamp)
            agent = agent_process(root, llm, urls["agent"], args.log_level, workers=workers, extra_env=agent_env)
            processes, chat_service = [llm, agent], None
            if chat:
                chat_service = conversation_process(
                    root, llm, agent, urls["chat"], args.log_level, workers=workers, redis_url=redis_url)
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
