"""The MCP servers of the service and the tools they offer now: ``MCPTools``.

Built in the lifespan when servers are configured (``build_mcp``), otherwise not at all: a
deployment without MCP servers runs exactly as before. Each server has an ``MCPConnection``; their
tools, checked and named (``tools.py``), are looked up by the name the model calls them by. A
profile that names servers (``mcp:`` in the profiles file) is completed when it is read: their
tools it allows join its ``tools``, and those that ask before each call (annotations, or the
profile's ``approval``) join its ``approval_required_tools``, so the run engine treats them as it
treats built-in tools.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
from collections.abc import Callable, Iterable
from contextlib import AsyncExitStack
from typing import Any

from agent_service.mcp.config import ConfigError, Limits, MCPServer, MCPServerConfig, load_servers, resolve
from agent_service.mcp.connection import MCPConnection
from agent_service.mcp.metrics import MCPMetrics
from agent_service.mcp.results import Reader
from agent_service.mcp.tools import MCPTool, model_name, schema_problem
from agent_service.profiles.schemas import Profile, ProfileMCPServer
from agent_service.profiles.service import ProfileStore
from agent_service.runs.engine import find_tool
from agent_service.settings import AgentServiceSettings
from agent_service.tools.base import Tool

log = logging.getLogger(__name__)


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


class MCPTools:
    def __init__(self, servers: list[MCPServer], limits: Limits, metrics: MCPMetrics, *, artifact_max_bytes: int,
                 builtin: Callable[[str], bool] = lambda _: False) -> None:
        self.limits = limits
        self.metrics = metrics
        self._artifact_max_bytes = artifact_max_bytes
        # Whether a name is a built-in tool's: a server's tool never takes one.
        self._builtin = builtin
        self.connections = {
            server.name: MCPConnection(server, limits, metrics, on_tools=lambda name=server.name: self._listed(name))
            for server in servers
        }
        self._tools: dict[str, MCPTool] = {}
        self._by_server: dict[str, list[MCPTool]] = {name: [] for name in self.connections}
        self._version = 0
        self._profiles: dict[str, tuple[int, Profile]] = {}

    async def start(self) -> None:
        """Connect to every server at once; each has its first attempt (a server that is down is
        retried in the background, its tools offered once it answers)."""
        await asyncio.gather(*(connection.start() for connection in self.connections.values()))

    async def aclose(self) -> None:
        await asyncio.gather(*(connection.aclose() for connection in self.connections.values()))

    def check(self, profiles: Iterable[Profile]) -> None:
        """Start-up stops when a profile names a server that is not configured."""
        for profile in profiles:
            unknown = sorted({entry.server for entry in profile.mcp} - set(self.connections))
            if unknown:
                raise ConfigError(f"profile {profile.name!r} names MCP servers that are not configured: {unknown}")

    def get(self, name: str) -> MCPTool | None:
        return self._tools.get(name)

    def _listed(self, server: str) -> None:
        """A server listed its tools: they replace its earlier ones."""
        connection = self.connections[server]
        config = connection.server.config
        reader = Reader(server, connection.server.max_result_bytes, self._artifact_max_bytes)
        taken = {name for name, tool in self._tools.items() if tool.server != server}
        offered: list[MCPTool] = []
        for definition in connection.tools[: self.limits.max_tools]:
            if not _matches(definition.name, config.tools.allow) or _matches(definition.name, config.tools.deny):
                continue
            name = model_name(config.tool_prefix, definition.name)
            problem = (
                "its name is not one a model can call (letters, digits, _ and -, at most 64 with the prefix)"
                if name is None else "another tool has its name" if name in taken or self._builtin(name)
                else schema_problem(definition.input_schema, self.limits.max_schema_bytes)
            )
            if problem is not None:
                self.metrics.tools_left_out.labels(server).inc()
                log.warning("MCP tool left out", extra={"mcp_server": server, "tool": definition.name[:128],
                                                       "reason": problem})
                continue
            assert name is not None
            taken.add(name)
            offered.append(MCPTool(connection, definition, name, reader))
        if len(connection.tools) > self.limits.max_tools:
            log.warning("MCP server offers more tools than are taken", extra={
                "mcp_server": server, "tools": len(connection.tools), "taken": self.limits.max_tools})
        for tool in self._by_server[server]:
            self._tools.pop(tool.name, None)
        self._by_server[server] = offered
        self._tools.update((tool.name, tool) for tool in offered)
        self.metrics.tools.labels(server).set(len(offered))
        self._version += 1

    # -- profiles ---------------------------------------------------------------------------------

    def complete(self, profile: Profile) -> Profile:
        """``profile`` with the tools of its MCP servers on offer now (kept until they change)."""
        cached = self._profiles.get(profile.name)
        if cached is not None and cached[0] == self._version:
            return cached[1]
        tools, asking = list(profile.tools), list(profile.approval_required_tools)
        for entry in profile.mcp:
            for tool in self._by_server.get(entry.server, ()):
                if self._offers(entry, tool) and tool.name not in tools:
                    tools.append(tool.name)
                    if entry.approval.get(tool.remote_name, tool.asks_approval):
                        asking.append(tool.name)
        completed = profile.model_copy(update={"tools": tools, "approval_required_tools": asking})
        self._profiles[profile.name] = (self._version, completed)
        return completed

    @staticmethod
    def _offers(entry: ProfileMCPServer, tool: MCPTool) -> bool:
        return _matches(tool.remote_name, entry.allow) and not _matches(tool.remote_name, entry.deny)

    def health(self) -> dict[str, Any]:
        return {name: connection.health() for name, connection in self.connections.items()}


class ToolsWithMCP:
    """The engine's tool lookup: the built-in tools, then the MCP servers' tools."""

    def __init__(self, builtin: Any, mcp: MCPTools) -> None:
        self._builtin = builtin
        self._mcp = mcp

    def get(self, name: str) -> Tool | None:
        try:
            tool = self._builtin.get(name)
        except LookupError:
            tool = None
        return tool if tool is not None else self._mcp.get(name)


def limits_of(settings: AgentServiceSettings) -> Limits:
    return Limits(
        call_timeout_s=settings.mcp_call_timeout_seconds, max_result_bytes=settings.mcp_max_result_bytes,
        connect_timeout_s=settings.mcp_connect_timeout_seconds,
        restart_delays_s=tuple(settings.mcp_restart_delays_seconds),
        breaker_failures=settings.mcp_breaker_failures, breaker_window_s=settings.mcp_breaker_window_seconds,
        breaker_open_s=settings.mcp_breaker_open_seconds, max_tools=settings.mcp_max_tools_per_server,
        max_schema_bytes=settings.mcp_max_schema_bytes, answer_timeout_s=settings.ask_user_timeout_seconds,
    )


async def build_mcp(
    stack: AsyncExitStack, settings: AgentServiceSettings, profiles: ProfileStore, metrics: MCPMetrics,
    builtin: Any,
) -> MCPTools | None:
    """The configured MCP servers, connected, their tools offered to the profiles that name them;
    None when none is configured (and no profile names one)."""
    configs: list[MCPServerConfig] = load_servers(settings.mcp_servers, settings.mcp_servers_file)
    if not configs:
        named = sorted({entry.server for profile in profiles.configured() for entry in profile.mcp})
        if named:
            raise ConfigError(f"profiles name MCP servers but none is configured: {named}")
        return None
    limits = limits_of(settings)
    mcp = MCPTools([resolve(config, limits) for config in configs], limits, metrics,
                   artifact_max_bytes=settings.artifact_max_bytes,
                   builtin=lambda name: find_tool(builtin, name) is not None)
    mcp.check(profiles.configured())
    stack.push_async_callback(mcp.aclose)
    await mcp.start()
    profiles.with_tools(mcp.complete)
    log.info("MCP servers", extra={"mcp_servers": mcp.health()})
    return mcp
