"""Prometheus metrics of one Agent Service app.

Each app gets its own ``CollectorRegistry`` (not the process-global one), so several apps in one
process, as in tests, never register the same metric twice.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from shared.labelled import Labelled

# Tool calls and first tokens span sub-millisecond (calculator) to tens of seconds (slow models).
_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# A run or a turn: from a fraction of a second (a short answer) to minutes (tools, a slow model).
_RUN_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300)
# The per-event overhead target is 1 ms at p95, so the buckets are fine below it and coarse above.
_OVERHEAD_BUCKETS = (
    0.00005, 0.0001, 0.00015, 0.0002, 0.0003, 0.0004, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005,
    0.01, 0.025, 0.05, 0.1, 0.25, 1,
)


class EventCounter(Collector):
    """A counter by one label, counted once per event on the event loop: a plain int per label value,
    read by the registry at scrape time. prometheus_client's ``Counter.inc`` takes a lock each call."""

    def __init__(self, name: str, documentation: str, label: str, registry: CollectorRegistry) -> None:
        self._name, self._doc, self._label = name, documentation, label
        self._counts: dict[str, float] = {}
        registry.register(self)

    def inc(self, value: str, amount: float = 1.0) -> None:
        self._counts[value] = self._counts.get(value, 0.0) + amount

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self._name, self._doc, labels=[self._label])
        for value, count in list(self._counts.items()):
            family.add_metric([str(value)], count)
        yield family


class EventHistogram(Collector):
    """A histogram observed once per event on the event loop: a bisect into plain counts, no lock
    (``Histogram.observe`` locks and walks its buckets in Python); exposed like ``Histogram``."""

    def __init__(self, name: str, documentation: str, buckets: Sequence[float], registry: CollectorRegistry) -> None:
        self._name, self._doc = name, documentation
        self._bounds = tuple(sorted(buckets))
        self._counts = [0] * (len(self._bounds) + 1)  # the last one is +Inf
        self._sum = 0.0
        registry.register(self)

    def observe(self, value: float) -> None:
        # ``le`` buckets: the first bound >= value.
        self._counts[bisect_left(self._bounds, value)] += 1
        self._sum += value

    def collect(self) -> Iterator[Metric]:
        counts, total = list(self._counts), self._sum
        cumulative, buckets = 0, []
        for bound, count in zip((*self._bounds, float("inf")), counts, strict=True):
            cumulative += count
            buckets.append((floatToGoString(bound), cumulative))
        yield HistogramMetricFamily(self._name, self._doc, buckets=buckets, sum_value=total)


class _FileCounter:
    """``EventCounter``'s interface on prometheus_client's own counter, for ``--workers N``: there a
    scrape reads only the files each worker's metrics write (``PROMETHEUS_MULTIPROC_DIR``), which a
    plain in-memory collector never reaches."""

    def __init__(self, name: str, documentation: str, label: str, registry: CollectorRegistry) -> None:
        self._children: Labelled[Counter] = Labelled(Counter(name, documentation, [label], registry=registry), label)

    def inc(self, value: str, amount: float = 1.0) -> None:
        self._children[value].inc(amount)


def _multiprocess() -> bool:
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


def event_counter(name: str, documentation: str, label: str, registry: CollectorRegistry) -> EventCounter | _FileCounter:
    return (_FileCounter if _multiprocess() else EventCounter)(name, documentation, label, registry)


def event_histogram(
    name: str, documentation: str, buckets: Sequence[float], registry: CollectorRegistry,
) -> EventHistogram | Histogram:
    if _multiprocess():
        return Histogram(name, documentation, buckets=buckets, registry=registry)
    return EventHistogram(name, documentation, buckets, registry)


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._runs()
        self._admission()
        self._event_log()
        self._model()
        self._extensions()

    def _runs(self) -> None:
        self.runs_started = Counter(
            "agent_runs_started", "Runs started (new messages and resumes)", registry=self.registry
        )
        self.runs_completed = Counter("agent_runs_completed", "Runs that ended with COMPLETE", registry=self.registry)
        self.runs_paused = Counter("agent_runs_paused", "Runs that paused with ASK_USER", registry=self.registry)
        self.runs_failed = Counter(
            "agent_runs_failed", "Runs that ended with ERROR, by code", ["code"], registry=self.registry
        )
        self.runs_continued = Counter(
            "agent_runs_continued", "Runs continued from their last checkpoint after their process died",
            registry=self.registry,
        )
        # Under --workers N: one series per live worker (``pid`` label); a dead worker's goes with it.
        self.active_runs = Gauge(
            "agent_active_runs", "Runs executing in this process", registry=self.registry, multiprocess_mode="liveall"
        )
        # With tracing on, each observation carries its run's trace as an exemplar (OpenMetrics output).
        self.run_duration = Histogram(
            "agent_run_duration_seconds", "Run duration, from its task's start to its end, by outcome "
            "(complete, ask_user, error; none: ended without an end of its own)", ["outcome"],
            buckets=_RUN_BUCKETS, registry=self.registry,
        )
        self.tool_latency = Histogram(
            "agent_tool_latency_seconds", "Tool call duration", ["tool"], buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )

    def _admission(self) -> None:
        # Admission (runs.admission): places taken, runs waiting for one, executes refused with 503.
        self.runs_in_flight = Gauge(
            "agent_runs_in_flight", "Runs holding one of this process's AGENT_SERVICE_MAX_RUNS_IN_FLIGHT places",
            registry=self.registry, multiprocess_mode="liveall",
        )
        self.runs_queued = Gauge(
            "agent_runs_queued", "Runs waiting for a place (WAITING, limit capacity)", registry=self.registry,
            multiprocess_mode="liveall",
        )
        self.runs_refused = Counter(
            "agent_runs_refused", "Executes answered 503 with Retry-After: every place taken and the queue full",
            registry=self.registry,
        )
        self.run_queue_wait = Histogram(
            "agent_run_queue_wait_seconds", "Time a run waited for a place before it started",
            buckets=_LATENCY_BUCKETS, registry=self.registry,
        )

    def _model(self) -> None:
        self.llm_ttft = Histogram(
            "agent_llm_time_to_first_token_seconds", "Time from model request to its first streamed event",
            buckets=_LATENCY_BUCKETS, registry=self.registry,
        )
        self.llm_connection_wait = Histogram(
            "agent_llm_connection_wait_seconds",
            "Time a model call waited for a free LLM connection (LLM_MAX_CONNECTIONS) before it started",
            buckets=_LATENCY_BUCKETS, registry=self.registry,
        )
        self.llm_connection_waiters = Gauge(
            "agent_llm_connection_waiters", "Model calls waiting now for a free LLM connection",
            registry=self.registry,
        )

    def _event_log(self) -> None:
        # Counted per event (``labels()`` on every event was ~3 % of the process's CPU under
        # streaming load, and ``inc`` takes a lock).
        self.events = event_counter("agent_events", "Events emitted, by type", "type", self.registry)
        self.event_batches = Histogram(
            "agent_event_log_batch_size", "Events written per group commit",
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000), registry=self.registry,
        )
        self.event_overhead = event_histogram(
            "agent_event_overhead_seconds",
            "From a model chunk received (its deltas coalesced) to its SSE bytes written to a live stream "
            "(non-terminal events)",
            _OVERHEAD_BUCKETS, self.registry,
        )

        self.live_tail_notifications = Counter(
            "agent_live_tail_notifications", "Commits of session events this process was told of (LISTEN/NOTIFY)",
            registry=self.registry,
        )
        # A follower of a run of another process reads the log: at start, when notified, or by the
        # slow fallback poll (a lost notification); "poll" staying near 0 means the push works.
        self.follow_reads: Labelled[Counter] = Labelled(
            Counter("agent_follow_reads", "Log reads of followers of another process's run, by cause", ["cause"],
                    registry=self.registry),
            "cause",
        )
        self.events_lost = Counter(
            "agent_event_log_lost", "Events the event log gave up writing (the database was away past the budget); "
            "their runs ended with ERROR STORAGE_UNAVAILABLE", registry=self.registry,
        )
        self.dropped_subscribers = Counter(
            "agent_live_subscribers_dropped", "Live streams ended because the client fell too far behind",
            registry=self.registry,
        )
    def _extensions(self) -> None:
        self.hook_failures = Counter(
            "agent_hook_failures", "Hook calls that raised or timed out and were skipped, by hook, point and reason",
            ["hook", "point", "reason"], registry=self.registry,
        )
        self.rate_limit_waits: Labelled[Counter] = Labelled(
            Counter(
                "agent_rate_limit_waits", "Model calls that waited for room in a rate limit (WAITING events), by limit",
                ["limit"], registry=self.registry,
            ),
            "limit",
        )
        self.memory_failures = Counter(
            "agent_memory_failures", "Memory store calls that failed or timed out, by operation", ["operation"],
            registry=self.registry,
        )
        self.memory_writes_dropped = Counter(
            "agent_memory_writes_dropped",
            "Completed turns not remembered: the write queue was full, or the service stopped first",
            ["reason"], registry=self.registry,
        )
        self.memory_health = Gauge(
            "agent_memory_health", "Long-term memory health: 0 NORMAL, 1 DEGRADED, 2 DOWN (history only)",
            registry=self.registry,
        )
