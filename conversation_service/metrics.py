"""Prometheus metrics of the ConversationService, on a per-app registry (two apps in one test
process must not share counters)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_FAST = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class ConversationMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.messages_posted = Counter(
            "conversation_messages_posted_total", "User messages accepted, by route target", ["target"], registry=r
        )
        self.messages_deduplicated = Counter(
            "conversation_messages_deduplicated_total", "Repeats of a client_message_id answered from the first",
            registry=r,
        )
        self.direct_replies = Counter(
            "conversation_direct_replies_total", "Direct LLM replies, by outcome", ["outcome"], registry=r
        )
        self.direct_first_chunk_seconds = Histogram(
            "conversation_direct_first_chunk_seconds", "From reply start to the first streamed chunk",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5), registry=r,
        )
        self.frames_published = Counter(
            "conversation_frames_published_total", "Frames put on live streams, by type", ["type"], registry=r
        )
        self.frame_emit_seconds = Histogram(
            "conversation_frame_emit_seconds", "Seq allocation + enqueue + hub publish of one frame",
            buckets=_FAST, registry=r,
        )
        self.frames_persisted = Counter("conversation_frames_persisted_total", "Frames committed", registry=r)
        self.frames_lost = Counter(
            "conversation_frames_lost_total", "Frames that could not be persisted (replay will miss them)", registry=r
        )
        self.frame_flush_seconds = Histogram(
            "conversation_frame_flush_seconds", "Duration of one group commit", buckets=_FAST, registry=r
        )
        self.ws_connections = Gauge("conversation_ws_connections", "Open WebSocket connections", registry=r)
        self.ws_rejected = Counter(
            "conversation_ws_rejected_total", "WebSocket connections refused, by reason", ["reason"], registry=r
        )
        self.ws_slow_consumers = Counter(
            "conversation_ws_slow_consumers_total", "Clients closed for falling behind", registry=r
        )
        self.ws_frames_sent = Counter("conversation_ws_frames_sent_total", "Frames sent to clients", registry=r)

        # Agent delegation (spec Story 8 monitoring: delegation rate, latency, errors, breaker).
        self.agent_turns = Counter(
            "conversation_agent_turns_total",
            "Delegated messages by outcome (complete, ask_user, agent_error, interrupted, fallback, failed)",
            ["outcome"], registry=r,
        )
        self.agent_first_chunk_seconds = Histogram(
            "conversation_agent_first_chunk_seconds", "From delegation start to the first agent event received",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5), registry=r,
        )
        self.agent_event_processing_seconds = Histogram(
            "conversation_agent_event_processing_seconds",
            "From an agent SSE event received to its frame published (spec: < 50 ms p95)",
            ["type"], buckets=_FAST, registry=r,
        )
        self.agent_event_delivery_seconds = Histogram(
            "conversation_agent_event_delivery_seconds",
            "From an agent SSE event received to its frame sent on a WebSocket of this process, per client",
            buckets=_FAST, registry=r,
        )
        self.agent_retries = Counter(
            "conversation_agent_retries_total", "Agent Service calls repeated, by kind (retry, reconnect)", ["kind"],
            registry=r,
        )
        self.agent_dead_letters = Counter(
            "conversation_agent_dead_letters_total", "Delegations written to dead_letters, by error code", ["code"],
            registry=r,
        )
        self.agent_breaker_transitions = Counter(
            "conversation_agent_breaker_transitions_total", "Circuit breaker state changes", ["state"], registry=r
        )
        self.agent_up = Gauge(
            "conversation_agent_service_up", "1 when the last Agent Service health check answered ok", registry=r
        )

        self.ask_user_questions = Counter(
            "conversation_ask_user_total", "ASK_USER questions by outcome (asked, answered, expired)", ["outcome"],
            registry=r,
        )

        # Every label value exists from the start (as 0), so the first event shows in rate() and
        # alerts need no special case for a series that does not exist yet.
        for outcome in ("complete", "ask_user", "agent_error", "interrupted", "fallback", "failed"):
            self.agent_turns.labels(outcome=outcome)
        for outcome in ("asked", "answered", "expired"):
            self.ask_user_questions.labels(outcome=outcome)
        for outcome in ("ok", "error"):
            self.direct_replies.labels(outcome=outcome)
        for kind in ("retry", "reconnect"):
            self.agent_retries.labels(kind=kind)
        for state in ("closed", "open", "half_open"):
            self.agent_breaker_transitions.labels(state=state)
