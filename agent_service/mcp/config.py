"""The MCP servers of a deployment, as configured (``AGENT_SERVICE_MCP_SERVERS``, JSON, and
``AGENT_SERVICE_MCP_SERVERS_FILE``, YAML): where each server is (a command to start, or a URL), how
to reach it, and the limits of its tools.

A secret is never written in the configuration: a value may be a reference to the environment
(``{"from_env": "NAME"}``), and a bearer token or an OAuth client secret can only be one. The
references are read once at start-up (a missing variable stops it, naming the variable, never a
value); the values are kept in ``Secret`` objects whose ``repr`` and ``str`` do not show them, so no
log line or error message carries one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

# What the model-facing name of a tool may be (the strictest provider's rule: OpenAI's function names).
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
SERVER_NAME = r"^[A-Za-z0-9_-]{1,32}$"


class FromEnv(BaseModel):
    """A value read from the environment variable ``from_env`` at start-up."""

    model_config = ConfigDict(extra="forbid")

    from_env: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


Value = str | FromEnv


class ToolFilter(BaseModel):
    """Which of a server's tools the deployment takes (``fnmatch`` patterns of its own names)."""

    model_config = ConfigDict(extra="forbid")

    allow: list[str] = ["*"]
    deny: list[str] = []


class OAuthClientCredentials(BaseModel):
    """OAuth 2.1 client credentials at the server's authorization server, which the server names
    in its protected resource metadata; only tokens of ``issuer`` are asked for."""

    model_config = ConfigDict(extra="forbid")

    client_id: Annotated[str, Field(min_length=1)]
    client_secret: FromEnv
    issuer: Annotated[str, Field(pattern=r"^https?://")]
    scope: str | None = None
    auth_method: Literal["client_secret_basic", "client_secret_post"] = "client_secret_basic"


class MCPServerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(pattern=SERVER_NAME)]
    # stdio: the command that starts the server, its arguments, environment and working directory.
    command: Annotated[str, Field(min_length=1)] | None = None
    args: list[str] = []
    env: dict[str, Value] = {}
    cwd: Path | None = None
    # Streamable HTTP: the endpoint, headers sent with every request, and one way to authenticate.
    url: str | None = None
    headers: dict[str, Value] = {}
    bearer_token: FromEnv | None = None
    oauth: OAuthClientCredentials | None = None
    # What is put before each tool's name, so two servers' tools never collide; None: "<name>_".
    prefix: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{0,32}$")] | None = None
    tools: ToolFilter = ToolFilter()
    # Per call; None: the deployment's AGENT_SERVICE_MCP_CALL_TIMEOUT_SECONDS / _MAX_RESULT_BYTES.
    timeout_s: Annotated[float, Field(gt=0, le=3600)] | None = None
    max_result_bytes: Annotated[int, Field(ge=1024, le=64 * 1024 * 1024)] | None = None
    # "auto": 2026-07-28 where the server offers it (server/discover), 2025-11-25 otherwise.
    protocol: Literal["auto", "2025-11-25", "2026-07-28"] = "auto"

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None:
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError("url must be an http(s) URL")
            if parts.username or parts.password:
                raise ValueError("url must not carry credentials (use headers, bearer_token or oauth)")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> MCPServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (stdio) or url (Streamable HTTP)")
        if self.command is not None and (self.headers or self.bearer_token or self.oauth):
            raise ValueError("headers, bearer_token and oauth are for a url")
        if self.url is not None and (self.args or self.env or self.cwd):
            raise ValueError("args, env and cwd are for a command")
        if self.bearer_token is not None and self.oauth is not None:
            raise ValueError("give bearer_token or oauth, not both")
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"

    @property
    def tool_prefix(self) -> str:
        return f"{self.name}_" if self.prefix is None else self.prefix


class Secret:
    """A value read from the environment; shown as ``***`` wherever it is printed."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__


@dataclass(frozen=True)
class Limits:
    """The deployment's defaults for every server, and the bounds on what a server may send."""

    call_timeout_s: float = 30.0
    max_result_bytes: int = 1024 * 1024
    connect_timeout_s: float = 10.0
    restart_delays_s: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
    breaker_failures: int = 3
    breaker_window_s: float = 60.0
    breaker_open_s: float = 30.0
    max_tools: int = 128
    max_schema_bytes: int = 32 * 1024
    # How long a 2025-11-25 call that asked the user something is held open for the answer.
    answer_timeout_s: float = 300.0


@dataclass(frozen=True)
class MCPServer:
    """A configured server with its references read: what the connection needs, secrets held apart."""

    config: MCPServerConfig
    env: Mapping[str, Secret]
    headers: Mapping[str, Secret]
    bearer_token: Secret | None
    client_secret: Secret | None
    call_timeout_s: float
    max_result_bytes: int

    @property
    def name(self) -> str:
        return self.config.name


class ConfigError(ValueError):
    """The MCP configuration is wrong; start-up stops with this message (it names no secret)."""


def _read(value: Value, server: str, where: str, environ: Mapping[str, str]) -> Secret:
    if isinstance(value, str):
        return Secret(value)
    found = environ.get(value.from_env)
    if found is None:
        raise ConfigError(f"MCP server {server!r}: environment variable {value.from_env} ({where}) is not set")
    return Secret(found)


def resolve(config: MCPServerConfig, limits: Limits, environ: Mapping[str, str] | None = None) -> MCPServer:
    """The server with every reference to the environment read."""
    env = os.environ if environ is None else environ
    name = config.name
    return MCPServer(
        config=config,
        env={key: _read(value, name, f"env {key}", env) for key, value in config.env.items()},
        headers={key: _read(value, name, f"header {key}", env) for key, value in config.headers.items()},
        bearer_token=_read(config.bearer_token, name, "bearer_token", env) if config.bearer_token else None,
        client_secret=_read(config.oauth.client_secret, name, "oauth.client_secret", env) if config.oauth else None,
        call_timeout_s=config.timeout_s or limits.call_timeout_s,
        max_result_bytes=config.max_result_bytes or limits.max_result_bytes,
    )


_SERVERS = TypeAdapter(list[MCPServerConfig])


def load_servers(inline: list[dict[str, Any]], file: Path | None) -> list[MCPServerConfig]:
    """The servers of ``AGENT_SERVICE_MCP_SERVERS`` and of the file (a list, or ``mcp_servers:`` with
    one), checked: each well formed, no name twice, no two with the same tool prefix."""
    entries = list(inline)
    if file is not None:
        try:
            loaded = yaml.safe_load(file.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read AGENT_SERVICE_MCP_SERVERS_FILE {file}: {exc}") from None
        if isinstance(loaded, dict):
            loaded = loaded.get("mcp_servers")
        if not isinstance(loaded, list):
            raise ConfigError(f"{file} must hold a list of MCP servers (or mcp_servers: with one)")
        entries += loaded
    try:
        servers = _SERVERS.validate_python(entries)
    except ValidationError as exc:
        raise ConfigError(f"MCP servers: {_errors(exc)}") from None
    for attribute, what in (("name", "name"), ("tool_prefix", "tool prefix")):
        seen: set[str] = set()
        for server in servers:
            value = getattr(server, attribute)
            if value in seen:
                raise ConfigError(f"two MCP servers have the {what} {value!r}")
            seen.add(value)
    return servers


def _errors(exc: ValidationError) -> str:
    # Locations and messages only: pydantic's default text repeats the input, which may be a secret.
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}" for error in exc.errors(include_input=False)
    )
