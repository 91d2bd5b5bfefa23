"""Prometheus metrics of the ConversationService, one group per domain, on a per-app registry (two
apps in one test process must not share counters). Each component is handed its own group.

Single-label metrics are ``Labelled``: their children are looked up once per label value, and every
value that can occur exists from the start (as 0), so the first event shows in ``rate()`` and alerts
need no special case for a series that does not exist yet.

It also carries the one timing that crosses components without a field on any domain type: when
the agent events behind the frames being published now were received (``agent_events_received``),
read by the WebSocket side for ``conversation_agent_event_delivery_seconds``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from shared.labelled import Labelled
from shared.oidc.metrics import OIDCMetrics

_FAST = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
_FIRST_CHUNK = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5)
# A whole reply: a fraction of a second to minutes (an agent with tools, a slow model).
_TURN = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300)


def _labelled(metric: Counter | Histogram, label: str, values: tuple[str, ...] = ()) -> Labelled:
    children: Labelled = Labelled(metric, label)
    for value in values:
        children[value]  # creates the child, so the series exists as 0
    return children


class MessageMetrics:
    def __init__(self, r: CollectorRegistry) -> None:
        self.posted = _labelled(Counter(
            "conversation_messages_posted_total", "User messages accepted, by route target", ["target"], registry=r
        ), "target")
        self.deduplicated = Counter(
            "conversation_messages_deduplicated_total", "Repeats of a client_message_id answered from the first",
            registry=r,
        )


class DirectReplyMetrics:
    def __init__(self, r: CollectorRegistry) -> None:
        self.replies = _labelled(Counter(
            "conversation_direct_replies_total", "Direct LLM replies, by outcome", ["outcome"], registry=r
        ), "outcome", ("ok", "error", "rate_limited", "stopped"))
        self.first_chunk_seconds = Histogram(
            "conversation_direct_first_chunk_seconds", "From reply start to the first streamed chunk",
            buckets=_FIRST_CHUNK, registry=r,
        )


class FrameMetrics:
    def __init__(self, r: CollectorRegistry) -> None:
        self.published = _labelled(Counter(
            "conversation_frames_published_total", "Frames put on live streams, by type", ["type"], registry=r
        ), "type")
        self.emit_seconds = Histogram(
            "conversation_frame_emit_seconds", "Seq allocation + enqueue + hub publish of one frame",
            buckets=_FAST, registry=r,
        )
        self.persisted = Counter("conversation_frames_persisted_total", "Frames committed", registry=r)
        self.lost = Counter(
            "conversation_frames_lost_total", "Frames that could not be persisted (replay will miss them)", registry=r
        )
        self.flush_seconds = Histogram(
            "conversation_frame_flush_seconds", "Duration of one group commit", buckets=_FAST, registry=r
        )
        self.hub_dropped = Counter(
            "conversation_hub_frames_dropped_total",
            "Frames not sent to the other replicas (Redis gone or far behind); their clients refill them from the database",
            registry=r,
        )


class WebSocketMetrics:
    def __init__(self, r: CollectorRegistry) -> None:
        self.connections = Gauge("conversation_ws_connections", "Open WebSocket connections", registry=r)
        self.rejected = _labelled(Counter(
            "conversation_ws_rejected_total", "WebSocket connections refused, by reason", ["reason"], registry=r
        ), "reason")
        self.slow_consumers = Counter(
            "conversation_ws_slow_consumers_total", "Clients closed for falling behind", registry=r
        )
        self.frames_sent = Counter("conversation_ws_frames_sent_total", "Frames sent to clients", registry=r)
        self.agent_event_delivery_seconds = Histogram(
            "conversation_agent_event_delivery_seconds",
            "From an agent SSE event received to its frame sent on a WebSocket of this process, per client",
            buckets=_FAST, registry=r,
        )


class AgentMetrics:
    """Agent delegation (spec Story 8 monitoring: delegation rate, latency, errors, breaker)."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.turns = _labelled(Counter(
            "conversation_agent_turns_total",
            "Delegated messages by outcome (complete, ask_user, agent_error, interrupted, fallback, failed, stopped)",
            ["outcome"], registry=r,
        ), "outcome", ("complete", "ask_user", "agent_error", "interrupted", "fallback", "failed", "stopped"))
        self.first_chunk_seconds = Histogram(
            "conversation_agent_first_chunk_seconds", "From delegation start to the first agent event received",
            buckets=_FIRST_CHUNK, registry=r,
        )
        self.event_processing_seconds = _labelled(Histogram(
            "conversation_agent_event_processing_seconds",
            "From an agent SSE event received to its frame published (spec: < 50 ms p95)",
            ["type"], buckets=_FAST, registry=r,
        ), "type")
        self.retries = _labelled(Counter(
            "conversation_agent_retries_total", "Agent Service calls repeated, by kind (retry, reconnect)", ["kind"],
            registry=r,
        ), "kind", ("retry", "reconnect"))
        self.dead_letters = _labelled(Counter(
            "conversation_agent_dead_letters_total", "Delegations written to dead_letters, by error code", ["code"],
            registry=r,
        ), "code")
        self.breaker_transitions = _labelled(Counter(
            "conversation_agent_breaker_transitions_total", "Circuit breaker state changes", ["state"], registry=r
        ), "state", ("closed", "open", "half_open"))
        self.a2a_breaker_transitions = Counter(
            "conversation_a2a_agent_breaker_transitions_total", "An A2A agent's circuit breaker state changes",
            ["agent", "state"], registry=r,
        )
        self.service_up = Gauge(
            "conversation_agent_service_up", "1 when the last Agent Service health check answered ok", registry=r
        )
        self.questions = _labelled(Counter(
            "conversation_ask_user_total", "ASK_USER questions by outcome (asked, answered, expired)", ["outcome"],
            registry=r,
        ), "outcome", ("asked", "answered", "expired"))
        self.takeovers = _labelled(Counter(
            "conversation_turn_takeovers_total",
            "Turns taken over after their replica died, by outcome (resumed, failed, restarted, settled)",
            ["outcome"], registry=r,
        ), "outcome", ("resumed", "failed", "restarted", "settled"))
        self.unmapped_events = _labelled(Counter(
            "conversation_agent_events_unmapped_total",
            "Agent events of a type the chat does not show (a newer Agent Service), by type", ["type"], registry=r,
        ), "type")


class TurnMetrics:
    """Admission of turns (``turns.admission``): places taken, turns waiting, messages refused."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.in_flight = Gauge(
            "conversation_turns_in_flight", "Replies holding one of this process's MAX_TURNS_IN_FLIGHT places",
            registry=r, multiprocess_mode="liveall",
        )
        self.queued = Gauge(
            "conversation_turns_queued", "Accepted messages waiting for a place (agent.waiting, limit capacity)",
            registry=r, multiprocess_mode="liveall",
        )
        self.refused = Counter(
            "conversation_turns_refused_total",
            "Messages answered 503 with Retry-After: every place taken and the queue full", registry=r,
        )
        # With tracing on, each observation carries its turn's trace as an exemplar (OpenMetrics output).
        self.duration_seconds = _labelled(Histogram(
            "conversation_turn_duration_seconds",
            "A reply's time in this process, from its start to its end (done) or to leaving it to a takeover (left)",
            ["outcome"], buckets=_TURN, registry=r,
        ), "outcome", ("done", "left"))
        self.queue_wait_seconds = Histogram(
            "conversation_turn_queue_wait_seconds", "Time an accepted message waited for a place before its reply",
            buckets=_FIRST_CHUNK, registry=r,
        )


class ConversationMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.messages = MessageMetrics(self.registry)
        self.direct = DirectReplyMetrics(self.registry)
        self.frames = FrameMetrics(self.registry)
        self.websocket = WebSocketMetrics(self.registry)
        self.agent = AgentMetrics(self.registry)
        self.oidc = OIDCMetrics(self.registry, "conversation")
        self.turns = TurnMetrics(self.registry)


# perf_counter() stamps of the agent events whose frames are being published in this context (one
# per event; several when answer chunks were coalesced into one frame). Set by the agent event
# processor around publishing them; a WebSocket client takes the stamps in effect when a frame is
# offered to it and observes each once the frame is sent. A frame from Redis (another replica) is
# delivered by the hub's reader, outside any such context, and is not measured, as before.
_received_at: ContextVar[tuple[float, ...] | None] = ContextVar("agent_events_received_at", default=None)


@contextmanager
def agent_events_received(stamps: tuple[float, ...]) -> Iterator[None]:
    token = _received_at.set(stamps)
    try:
        yield
    finally:
        _received_at.reset(token)


def agent_events_in_hand() -> tuple[float, ...] | None:
    """The stamps set by the innermost ``agent_events_received`` around this call, if any."""
    return _received_at.get()
