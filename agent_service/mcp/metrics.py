"""The MCP metrics, on the service's registry: calls per server and outcome, their duration, each
server's state, restarts and the tools it offers."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class MCPMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        # ok, error (the server refused or failed the call), failed (no answer: timeout, broken
        # connection), refused (not made: restarting, breaker open), asked / input_required (the
        # server needs the user), cancelled (the run stopped).
        self.calls = Counter(
            "agent_mcp_calls", "MCP tool calls by server and outcome", ["server", "outcome"], registry=registry,
        )
        self.duration = Histogram(
            "agent_mcp_call_duration_seconds", "MCP tool calls, from the call to its result or its question",
            ["server"], buckets=_BUCKETS, registry=registry,
        )
        self.up = Gauge(
            "agent_mcp_server_up", "1 while the MCP server is connected and its tools usable", ["server"],
            registry=registry, multiprocess_mode="liveall",
        )
        self.restarts = Counter(
            "agent_mcp_server_restarts", "Times an MCP server's connection was lost and made again", ["server"],
            registry=registry,
        )
        self.tools = Gauge(
            "agent_mcp_tools", "Tools of the MCP server on offer (after the deployment's filter and checks)",
            ["server"], registry=registry, multiprocess_mode="liveall",
        )
        self.tools_left_out = Counter(
            "agent_mcp_tools_left_out", "Tools of an MCP server left out (a name or schema the model cannot take)",
            ["server"], registry=registry,
        )
