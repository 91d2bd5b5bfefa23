"""Timeouts and retry knobs of the ``AgentServiceClient``; the defaults are the spec's numbers (Story 7)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AgentClientConfig:
    connect_timeout: float = 5.0
    write_timeout: float = 10.0
    # Waiting for a free connection of the pool; a full pool is back-pressure, not a reason to hang.
    pool_timeout: float = 5.0
    # Idle time allowed between two reads of a stream. The Agent Service sends a heartbeat comment
    # every 15 s, so anything above 30 s only fires on a dead connection.
    read_timeout: float = 45.0
    # From sending a request to receiving its first event (or, for plain calls, its whole answer).
    request_timeout: float = 60.0
    # Whole lifetime of one event stream, reconnects included; None means no limit.
    stream_timeout: float | None = 300.0
    # Delay before each retry of a request that has not started streaming; one delay per retry.
    retry_delays: tuple[float, ...] = (1.0, 2.0, 4.0)
    # A 500 may be a bug that repeats; it gets this many retries, 503 and connection errors get all.
    server_error_retries: int = 1
    # Delay before each consecutive reconnect of a stream that broke mid-run; the last one repeats
    # while the stream has been broken for less than ``resume_budget`` (a short partition, an Agent
    # Service restart: the run goes on there and its events wait in its log).
    reconnect_delays: tuple[float, ...] = (1.0, 2.0, 4.0)
    resume_budget: float = 30.0
    # One SSE event larger than this is a protocol error (the events are untrusted input).
    max_event_bytes: int = 1024 * 1024
    # How much of an error response (or a JSON answer) is read at most.
    max_response_bytes: int = 256 * 1024
    max_connections: int = 100
    max_keepalive_connections: int = 20

    def __post_init__(self) -> None:
        for name in ("connect_timeout", "write_timeout", "pool_timeout", "read_timeout", "request_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
        if self.stream_timeout is not None and not self.stream_timeout > 0:
            raise ValueError("stream_timeout must be > 0 or None")
        for name in ("retry_delays", "reconnect_delays"):
            delays = getattr(self, name)
            if not isinstance(delays, tuple) or any(not d >= 0 for d in delays) or len(delays) > 20:
                raise ValueError(f"{name} must be a tuple of at most 20 delays >= 0")
        if not self.resume_budget >= 0:
            raise ValueError("resume_budget must be >= 0")
        if self.server_error_retries < 0:
            raise ValueError("server_error_retries must be >= 0")
        if self.max_event_bytes < 1024 or self.max_response_bytes < 1024:
            raise ValueError("max_event_bytes and max_response_bytes must be >= 1024")
        if self.max_connections < 1 or not 0 <= self.max_keepalive_connections <= self.max_connections:
            raise ValueError("need max_connections >= 1 and 0 <= max_keepalive_connections <= max_connections")

    @property
    def max_attempts(self) -> int:
        """The first try plus one retry per configured delay."""
        return 1 + len(self.retry_delays)
