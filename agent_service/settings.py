"""Configuration of the Agent Service, read from the environment (prefix ``AGENT_SERVICE_``).

The defaults give the embedded topology: a SQLite file under ``var/``, migrated on start. The LLM
provider (``LLM_PROVIDER``, ``LLM_BASE_URL``...) and the heap profiler (``DEBUG_HEAP_PROFILE``) keep the
unprefixed variables they share with the other service, read here with the rest: one tree, each
variable read once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from shared.db import is_sqlite
from shared.fastpath.coalesce import valid_budget_ms
from shared.heap_profile import HeapProfileSettings
from shared.llm.config import LLMSettings
from shared.media import is_media_range
from shared.oidc.settings import OIDCSettings
from shared.protocol import MAX_ARTIFACT_BYTES
from shared.rate_limit.config import RateLimitSettings

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent


class AgentOIDCSettings(OIDCSettings):
    """Access tokens of the identity provider for this service's audience (a caller's client
    credentials), accepted besides the API keys (``AGENT_SERVICE_AUTH_OIDC_*``)."""

    model_config = SettingsConfigDict(env_prefix="AGENT_SERVICE_AUTH_OIDC_", extra="ignore", case_sensitive=False)


_Name = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[!-~]+$")]
_PERMISSIONS = ("runs", "a2a", "memory", "mcp")


class CallerKeySettings(BaseModel):
    """One caller holding an API key (``AGENT_SERVICE_CALLERS``, a JSON list of these): its name (recorded
    as the owner of what it creates), its kind, the organisations it may act for (``*``: any, for a
    service) and the doors it may use. Only the key's SHA-256 is configured
    (``python -m agent_service hash-key`` prints it)."""

    model_config = ConfigDict(extra="forbid")

    name: _Name
    key_sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-fA-F]{64}$")]
    kind: Literal["service", "agent"] = "service"
    orgs: Annotated[list[_Name], Field(min_length=1, max_length=1000)] = ["*"]
    permissions: list[Literal["runs", "a2a", "memory", "mcp"]] = list(_PERMISSIONS)

    @model_validator(mode="after")
    def _any_or_a_list(self) -> CallerKeySettings:
        if "*" in self.orgs and len(self.orgs) > 1:
            raise ValueError("orgs: '*' (any) or a list of organisations, not both")
        return self


class AgentServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENT_SERVICE_", extra="ignore", populate_by_name=True)

    database_url: str = "sqlite+aiosqlite:///var/agent_service.db"
    # Several keys are valid at once so a key can be rotated without downtime. Each plain key is the
    # full-trust service "default" (compatibility; said at start-up): name callers in ``callers`` instead.
    api_keys: Annotated[list[str], NoDecode] = []
    # Callers with an API key each, a name, organisations and permissions (docs/operations.md, "Who can
    # do what"). Two entries may share a name (a key being rotated): they are the same caller.
    callers: Annotated[list[CallerKeySettings], Field(max_length=10_000)] = []
    # Access tokens (auth_oidc) of these clients (azp / client_id) are services that act for users;
    # of those in auth_agent_clients, outside agents that act as themselves; a token that carries
    # auth_service_role in its permissions claim is a service too. Any other token is a user's.
    auth_service_clients: Annotated[list[str], NoDecode] = []
    auth_agent_clients: Annotated[list[str], NoDecode] = []
    auth_service_role: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    # AGENT_SERVICE_AUTH_OIDC_ISSUER/_AUDIENCE...: bearer access tokens of the identity provider are
    # accepted too, so the services need share no key.
    auth_oidc: AgentOIDCSettings = Field(default_factory=AgentOIDCSettings)
    heartbeat_seconds: Annotated[float, Field(gt=0)] = 15.0
    sse_retry_ms: Annotated[int, Field(ge=0)] = 3000
    max_message_chars: Annotated[int, Field(gt=0)] = 32_000
    profiles_file: Path = PACKAGE_DIR / "profiles.yaml"
    # Folder of documents knowledge_search answers from; unset: the project's docs/ and README.md.
    knowledge_dir: Path | None = None
    ask_user_timeout_seconds: Annotated[float, Field(gt=0)] = 300.0
    group_commit_ms: Annotated[float, Field(ge=0)] = 50.0
    # A run's model deltas that arrive within this many ms of the first one waiting go out as one
    # ANSWER_CHUNK (one seq, one durable write, one SSE message); the first of a run is never held.
    # 0: one event per delta. STREAM_COALESCE_MS, the ConversationService's name, is read too.
    stream_coalesce_ms: float = Field(
        default=25.0,
        validation_alias=AliasChoices("AGENT_SERVICE_STREAM_COALESCE_MS", "STREAM_COALESCE_MS"),
    )
    # While the database is away (a restart, a failover) the event log's writes wait and are retried
    # in order for this long; past it the runs whose events could not be written end with ERROR
    # STORAGE_UNAVAILABLE, never with a COMPLETE over the hole.
    durable_write_budget_seconds: Annotated[float, Field(gt=0, le=3600)] = 30.0
    # Events waiting for the group commit, all runs of the process together; past it a run's model
    # stream waits for the database instead of growing memory.
    event_log_max_pending: Annotated[int, Field(ge=100)] = 50_000
    # Seqs a run reserves durably (in its claim, then again before it runs out) so that it may show
    # events before their group commit; a crash leaves at most this many numbers unused.
    seq_reserve_block: Annotated[int, Field(ge=2, le=1_000_000)] = 1000
    # None: migrate on start only for SQLite (the embedded default); PostgreSQL is migrated explicitly.
    migrate_on_start: bool | None = None
    # Admission: runs this process executes at once, and runs that may wait for one of those places
    # (each says so with a WAITING event, limit "capacity"); past both, an execute is answered 503 with
    # Retry-After before anything is written. 100 is LLM_MAX_CONNECTIONS' default (a run past it would
    # wait for a model connection without saying so) and what one process serves on 2 cores with room
    # (docs/benchmarks.md: 100 to 200 paced streams); the queue holds four more rounds of it.
    max_runs_in_flight: Annotated[int, Field(ge=1, le=100_000)] = 100
    max_queued_runs: Annotated[int, Field(ge=0, le=1_000_000)] = 400
    # Per-subscriber live queue; a subscriber that falls this far behind is dropped and reconnects.
    live_queue_size: Annotated[int, Field(gt=0)] = 10_000
    # Transcripts of sessions this process completed, kept so the next message to one starts its
    # model call before the session is read (events.snapshots); bounded by their estimated size.
    # 0 keeps none (every run reads its session first).
    session_snapshot_max_bytes: Annotated[int, Field(ge=0)] = 4 * 1024 * 1024
    # A replica that does not run a session itself follows its event log. On PostgreSQL each commit
    # of the run's events is pushed (LISTEN/NOTIFY) and the log is polled only this often, as a
    # safety net for a lost notification; on SQLite (no cross-process push) it is polled every
    # ``replay_poll_seconds``.
    follow_fallback_poll_seconds: Annotated[float, Field(gt=0)] = 5.0
    replay_poll_seconds: Annotated[float, Field(gt=0)] = 0.5
    # Tool results are cut to this many characters before they go back to the model.
    max_tool_result_chars: Annotated[int, Field(gt=0)] = 16_000
    # The largest file (or JSON object, serialised) a tool may hand the user as an artifact, in
    # bytes: it travels in an event, is stored in the log and shown in the chat.
    artifact_max_bytes: Annotated[int, Field(ge=1024, le=MAX_ARTIFACT_BYTES)] = 256 * 1024
    # Longest a tool call may take before the model is told it timed out.
    tool_timeout_seconds: Annotated[float, Field(gt=0)] = 30.0
    # Whole request bodies (message plus chat history) are refused with 413 above this.
    max_body_bytes: Annotated[int, Field(gt=0)] = 8 * 1024 * 1024
    # Replicas share the database: a run's owner renews its lease every lease_renew_seconds, and
    # any replica takes over (continues, or ends) a run whose lease is lease_seconds old. A longer
    # lease tolerates longer stalls (database outage, blocked loop) at the cost of a slower recovery
    # after a crash.
    lease_seconds: Annotated[float, Field(gt=0)] = 15.0
    lease_renew_seconds: Annotated[float, Field(gt=0)] = 5.0
    # A run whose process died is continued from its last checkpoint by the replica whose sweep finds
    # it (this one restarted included) at most this many times; past that it ends ERROR INTERRUPTED.
    # 0: never continued (as before durable runs).
    max_continuations: Annotated[int, Field(ge=0, le=100)] = 2
    # Seconds uvicorn keeps an idle keep-alive connection open. Longer than any client or load
    # balancer in front keeps it idle (nginx upstream keepalive_timeout: 60 s by default), so it is the
    # client that closes: a server-side close racing the client's reuse of the connection loses a request.
    keep_alive_timeout_s: Annotated[int, Field(ge=1, le=3600)] = 75
    # On SIGTERM: how long open connections get before they are cut off (SSE streams end at once;
    # runs under way are handed over to be continued elsewhere, or end with ERROR INTERRUPTED when
    # max_continuations is 0). Keep it below the orchestrator's kill timeout.
    shutdown_grace_s: Annotated[float, Field(gt=0, le=600)] = 8.0
    # Lifecycle hooks (agent_service.hooks), ``module:Class`` each, called in this order; then those
    # installed packages declare under the ``taskforce.agent_hooks`` entry point group.
    hooks: Annotated[list[str], NoDecode] = []
    hook_entry_points: bool = True
    # Longest one hook call may take before it is skipped (and counted as failed).
    hook_timeout_seconds: Annotated[float, Field(gt=0)] = 2.0
    # The file the audit log hook appends its JSON lines to.
    audit_log: Path | None = None
    # ``organisation:tool`` pairs the tool block hook refuses.
    blocked_tools: Annotated[list[str], NoDecode] = []
    # Long-term memory: each completed turn is remembered for its (organisation, user) and recalled
    # in later conversations (agent_service.memory).
    memory_enabled: bool = True
    memory_top_k: Annotated[int, Field(ge=1, le=50)] = 8
    memory_degraded_top_k: Annotated[int, Field(ge=1, le=50)] = 3
    # Tokens the recalled memories may add to a prompt.
    memory_token_budget: Annotated[int, Field(ge=1)] = 600
    memory_recency_half_life_hours: Annotated[float, Field(gt=0)] = 168.0
    # A store call slower than this counts as a failure (the run goes on without it).
    memory_timeout_seconds: Annotated[float, Field(gt=0)] = 2.0
    memory_degraded_window_seconds: Annotated[float, Field(gt=0)] = 15.0
    memory_fail_max: Annotated[int, Field(ge=1)] = 5
    memory_reset_timeout_seconds: Annotated[float, Field(gt=0)] = 60.0
    # Completed turns waiting to be remembered (written after their run's end); more are dropped and
    # counted. On shutdown the queue is written for at most memory_drain_seconds.
    memory_write_queue_size: Annotated[int, Field(ge=1)] = 1000
    memory_drain_seconds: Annotated[float, Field(ge=0)] = 5.0
    # A2A (agent_service.a2a): the profile a message runs with unless its metadata names another
    # skill, and the user its runs act for unless the request's metadata names one.
    a2a_profile: Annotated[str, Field(min_length=1, max_length=128)] = "default"
    a2a_user_id: Annotated[str, Field(min_length=1, max_length=128)] = "a2a"
    # The base URL the Agent Card gives for the A2A interfaces (behind a proxy, its public URL);
    # unset: the URL the card was fetched from.
    a2a_public_url: str | None = None
    # The files an A2A message may carry, as media ranges, comma-separated ("text/*,application/pdf").
    # A text file is read inline, another is named to the model; a file of a type not listed is
    # refused with ContentTypeNotSupportedError. Empty: no files.
    a2a_file_types: Annotated[list[str], NoDecode, Field(max_length=100)] = ["*/*"]
    # MCP servers whose tools profiles may offer (agent_service.mcp; docs: "Tools from MCP servers"):
    # a JSON list here, and/or a YAML file of them. Each server's entry is checked at start-up.
    mcp_servers: list[dict[str, Any]] = []
    mcp_servers_file: Path | None = None
    # Defaults of every server, each may set its own timeout and result cap.
    mcp_call_timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = 30.0
    mcp_max_result_bytes: Annotated[int, Field(ge=1024, le=64 * 1024 * 1024)] = 1024 * 1024
    # A server's handshake (or server/discover) and tool listing, and an HTTP connection, take at most this.
    mcp_connect_timeout_seconds: Annotated[float, Field(gt=0, le=300)] = 10.0
    # A server whose connection is lost (a stdio server that exited) is connected again after these
    # delays in turn, the last repeated; they start again once it stayed up a minute.
    mcp_restart_delays_seconds: Annotated[list[float], NoDecode, Field(min_length=1)] = [1, 2, 4, 8, 16, 30]
    # The breaker of each server: this many failed calls (no answer, a broken connection) within the
    # window open it; calls then fail at once for the open period, then one probe is let through.
    mcp_breaker_failures: Annotated[int, Field(ge=1)] = 3
    mcp_breaker_window_seconds: Annotated[float, Field(gt=0)] = 60.0
    mcp_breaker_open_seconds: Annotated[float, Field(gt=0)] = 30.0
    # Bounds on what a server offers: tools taken from it, and the size of one tool's input schema.
    mcp_max_tools_per_server: Annotated[int, Field(ge=1, le=1000)] = 128
    mcp_max_schema_bytes: Annotated[int, Field(ge=256, le=1024 * 1024)] = 32 * 1024
    # The Agent Service as an MCP server at /mcp (agent_service.mcp_server): the ask tool, behind the
    # same authentication as the other doors (permission "mcp"); the profile ask uses unless told.
    mcp_server_enabled: bool = True
    mcp_server_profile: Annotated[str, Field(min_length=1, max_length=128)] = "default"
    # Secrets (comma-separated, the first seals) the request state of a question asked through /mcp
    # at 2026-07-28 is sealed with, so that the answer may reach another replica; unset: a key of
    # this process only (one replica).
    mcp_server_state_keys: Annotated[list[str], NoDecode] = []
    log_level: str = "INFO"
    llm: LLMSettings = Field(default_factory=LLMSettings)
    # Limits on model calls per organisation and model (AGENT_SERVICE_RATE_LIMIT_*).
    rate_limit: RateLimitSettings = Field(default_factory=RateLimitSettings)
    # Unprefixed, as the ConversationService reads it: with it, replicas (and the direct path) share
    # one rate-limit budget; without it each process counts its own.
    redis_url: str | None = Field(default=None, validation_alias=AliasChoices("redis_url", "REDIS_URL"))
    debug: HeapProfileSettings = Field(default_factory=HeapProfileSettings)

    @field_validator(
        "api_keys", "hooks", "blocked_tools", "a2a_file_types", "auth_service_clients", "auth_agent_clients",
        mode="before",
    )
    @classmethod
    def _split_keys(cls, value: object) -> object:
        if isinstance(value, str):
            return [key.strip() for key in value.split(",") if key.strip()]
        return value

    @field_validator("stream_coalesce_ms")
    @classmethod
    def _coalesce_budget(cls, value: float) -> float:
        return valid_budget_ms(value)

    @field_validator("mcp_server_state_keys", mode="before")
    @classmethod
    def _split_state_keys(cls, value: object) -> object:
        if isinstance(value, str):
            return [key.strip() for key in value.split(",") if key.strip()]
        return value

    @field_validator("mcp_restart_delays_seconds", mode="before")
    @classmethod
    def _split_delays(cls, value: object) -> object:
        if isinstance(value, str):
            return [float(part) for part in value.split(",") if part.strip()]
        return value

    @field_validator("mcp_restart_delays_seconds")
    @classmethod
    def _positive_delays(cls, value: list[float]) -> list[float]:
        if any(delay <= 0 or delay > 3600 for delay in value):
            raise ValueError("each delay is more than 0 and at most 3600 seconds")
        return value

    @field_validator("a2a_file_types")
    @classmethod
    def _media_ranges(cls, value: list[str]) -> list[str]:
        wrong = [entry for entry in value if not is_media_range(entry)]
        if wrong:
            raise ValueError(f"not media ranges (type/subtype, * for any): {wrong}")
        return [entry.lower() for entry in value]

    @model_validator(mode="after")
    def _renew_within_lease(self) -> AgentServiceSettings:
        # Renewing no more often than the lease lasts would let live runs be failed as orphans.
        if self.lease_renew_seconds >= self.lease_seconds:
            raise ValueError("lease_renew_seconds must be shorter than lease_seconds")
        return self

    @property
    def should_migrate_on_start(self) -> bool:
        return self.migrate_on_start if self.migrate_on_start is not None else is_sqlite(self.database_url)
