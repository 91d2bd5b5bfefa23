"""ConversationService configuration: one tree, each environment variable read once, under the
names the spec and the README use (unprefixed here; ``AGENT_ROUTING_*``, ``AGENT_*``/``ASK_USER_*``,
``HISTORY_*`` and ``LLM_*`` in the branches). The defaults give the embedded topology: a SQLite file,
in-process fan-out, the Agent Service on loopback.
"""

from __future__ import annotations

import logging
from functools import cached_property

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from conversation_service.settings.a2a_agents import A2AAgentsSettings
from conversation_service.settings.auth import ChatOIDCSettings, WebSessionSettings
from conversation_service.settings.delegation import DelegationSettings
from conversation_service.settings.history import HistorySettings
from conversation_service.settings.routing import RoutingSettings
from shared.db import is_sqlite
from shared.fastpath.coalesce import valid_budget_ms
from shared.llm.config import LLMSettings
from shared.rate_limit.config import RateLimitSettings

log = logging.getLogger(__name__)

# Only good for a laptop: a JWT signed with a public secret proves nothing.
DEV_JWT_SECRET = "dev-insecure-jwt-secret-change-me-0000000000"


class ConversationSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", extra="ignore", case_sensitive=False)

    conversation_database_url: str = "sqlite+aiosqlite:///var/conversation_service.db"
    database_pool_size: int = Field(default=10, ge=1, le=200)
    # Unset means true on SQLite (the embedded default needs no separate step) and false on
    # PostgreSQL, where several replicas must not race to migrate: run `... migrate` once instead.
    migrate_on_start: bool | None = None

    agent_service_url: str = "http://127.0.0.1:8001"
    agent_service_api_key: SecretStr = SecretStr("")
    # Instead of (or besides) the API key: an access token of AUTH_OIDC_ISSUER for the Agent Service
    # (client credentials). AGENT_SERVICE_GRANT_PARAMS, URL-encoded, says which audience to ask for
    # the way the provider wants it (resource=..., audience=..., scope=api://.../.default).
    agent_service_client_id: str | None = Field(default=None, max_length=256)
    agent_service_client_secret: SecretStr = SecretStr("")
    agent_service_grant_params: str = Field(default="", max_length=2000)

    # X-Operator-Key of the operator routes (replaying dead letters); unset, they answer 404.
    operator_api_key: SecretStr = SecretStr("")
    auth_jwt_secret: SecretStr = SecretStr(DEV_JWT_SECRET)
    auth_jwt_leeway_s: float = Field(default=10.0, ge=0, le=300)
    dev_token_ttl_s: int = Field(default=7 * 24 * 3600, ge=60)
    # AUTH_OIDC_*: with an issuer, user tokens are the identity provider's access tokens (HS256
    # tokens are refused) and, with a client id, the page signs in there (AUTH_SESSION_*).
    oidc: ChatOIDCSettings = Field(default_factory=ChatOIDCSettings)
    session: WebSessionSettings = Field(default_factory=WebSessionSettings)

    # Unset: frames fan out in-process only (one replica). Set: Redis pub/sub across replicas.
    redis_url: str | None = None
    redis_channel_prefix: str = "taskforce:conversation"

    # Comma-separated; browsers always send Origin, so a WebSocket from any other page is refused.
    # The page this service serves itself (same origin as the Host header) is always allowed.
    ws_allowed_origins: str = "http://127.0.0.1:8000,http://localhost:8000"
    ws_auth_timeout_s: float = Field(default=5.0, gt=0, le=60)
    # Frames a client may fall behind by before it is closed as a slow consumer.
    ws_client_queue_size: int = Field(default=512, ge=1, le=100_000)
    ws_max_frame_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)
    # How long a replay waits for frames that were allocated but not yet persisted (another
    # replica's writer, or ours between two group commits).
    ws_replay_wait_s: float = Field(default=2.0, gt=0, le=30)
    # permessage-deflate on the chat WebSocket. Off: the frames are small JSON (one token of a reply
    # each), so compressing them saves a few bytes per frame for a zlib call per frame and a
    # compression context per connection; turn it on for clients on slow links.
    ws_per_message_deflate: bool = False

    max_message_chars: int = Field(default=32_000, ge=1, le=200_000)
    max_request_bytes: int = Field(default=256 * 1024, ge=1024, le=16 * 1024 * 1024)
    max_title_chars: int = Field(default=200, ge=1, le=200)

    # Group commit of frames: at most this long between a frame and its row.
    frame_flush_interval_s: float = Field(default=0.05, gt=0, le=5)
    frame_flush_max_batch: int = Field(default=500, ge=1, le=10_000)
    frame_writer_queue_size: int = Field(default=20_000, ge=100)
    # While the database is away (a restart, a failover), frame writes and the writes that end a
    # reply wait and are retried in order for this long; past it a reply ends with an error the user
    # sees (or, when even that cannot be stored, is left to a takeover once the database is back).
    durable_write_budget_s: float = Field(default=30.0, gt=0, le=3600)
    # Frame seqs are reserved durably this many at a time (one small write per block and
    # conversation); after a crash the unused rest of a block is a hole in the seqs, never a reuse.
    frame_seq_block: int = Field(default=1000, ge=1, le=100_000)

    # Turns (the reply to each accepted message) are owned under a lease the owner renews every
    # third of it; a turn whose lease ran out (its replica died) is taken over by the next sweep of
    # any replica, so a reply ends within about lease + sweep interval of a crash. Replica clocks
    # must agree to well within the lease.
    turn_lease_s: float = Field(default=10.0, ge=1, le=600)
    turn_sweep_interval_s: float = Field(default=2.0, gt=0, le=60)
    # Admission: replies this process runs at once, and accepted messages that may wait for one of
    # those places (the page shows the wait as agent.waiting, limit "capacity"); past both, a message
    # is answered 503 with Retry-After before it is stored. 100 matches the Agent Service's runs in
    # flight and what one process serves on 2 cores with room (docs/benchmarks.md); the queue holds
    # four more rounds of it.
    max_turns_in_flight: int = Field(default=100, ge=1, le=100_000)
    max_queued_turns: int = Field(default=400, ge=0, le=1_000_000)

    # The direct reply's model deltas that arrive within this many ms of the first one waiting go out
    # as one message.delta (one frame, one fan-out message, one WebSocket write); the first is never
    # held. 0: one frame per delta.
    stream_coalesce_ms: float = 25.0

    # Direct LLM path: how many recent messages make up the prompt, its system prompt, and the cap on
    # a reply's tokens (sent as max_tokens: a base model behind an OpenAI-compatible server may
    # otherwise go on for thousands). DIRECT_SYSTEM_PROMPT, the prompt's earlier name, is still read.
    direct_history_messages: int = Field(default=20, ge=1, le=1000)
    direct_llm_system_prompt: str = Field(
        default="You are a helpful assistant in a chat product. Answer concisely.", min_length=1, max_length=20_000,
        validation_alias=AliasChoices("direct_llm_system_prompt", "direct_system_prompt"),
    )
    direct_llm_max_tokens: int = Field(default=512, ge=1, le=128_000)

    # Seconds uvicorn keeps an idle keep-alive connection open. Longer than any client or load
    # balancer in front keeps it idle (nginx upstream keepalive_timeout: 60 s by default), so it is the
    # client that closes: a server-side close racing the client's reuse of the connection loses a request.
    keep_alive_timeout_s: int = Field(default=75, ge=1, le=3600)
    # On SIGTERM: how long open connections and replies under way get before they are cut off.
    # Keep it below the orchestrator's kill timeout (docker: 10 s, Kubernetes: 30 s).
    shutdown_grace_s: float = Field(default=8.0, gt=0, le=600)
    log_level: str = "INFO"
    # With tracing on (OTEL_EXPORTER_OTLP_ENDPOINT): whether a client's W3C trace context (the
    # traceparent header, or a WebSocket message's traceparent field) is continued at this public
    # edge. Off, a message starts a trace of its own that only links to the client's.
    tracing_trust_client_context: bool = False

    # The branches read their own variables when the tree is made (AGENT_ROUTING_ENABLED, the
    # rollback switch, is ``routing.enabled``).
    routing: RoutingSettings = Field(default_factory=RoutingSettings)
    delegation: DelegationSettings = Field(default_factory=DelegationSettings)
    # A2A_AGENTS, A2A_DEFAULT_AGENT, A2A_ORG_AGENTS: A2A agents the chat may delegate to.
    a2a: A2AAgentsSettings = Field(default_factory=A2AAgentsSettings)
    history: HistorySettings = Field(default_factory=HistorySettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    # The Agent Service's rate limits, read from the same AGENT_SERVICE_RATE_LIMIT_* variables:
    # the direct path honours them for its own model calls.
    rate_limit: RateLimitSettings = Field(default_factory=RateLimitSettings)

    @field_validator("stream_coalesce_ms")
    @classmethod
    def _coalesce_budget(cls, value: float) -> float:
        return valid_budget_ms(value)

    @model_validator(mode="after")
    def _sweep_within_lease(self) -> ConversationSettings:
        if self.turn_sweep_interval_s >= self.turn_lease_s:
            raise ValueError("TURN_SWEEP_INTERVAL_S must be below TURN_LEASE_S")
        return self

    @model_validator(mode="after")
    def _agent_client_credentials(self) -> ConversationSettings:
        if self.agent_service_client_id:
            if not self.oidc.enabled:
                raise ValueError("AGENT_SERVICE_CLIENT_ID needs AUTH_OIDC_ISSUER (its token endpoint issues the token)")
            if not self.agent_service_client_secret.get_secret_value():
                raise ValueError("AGENT_SERVICE_CLIENT_SECRET is required with AGENT_SERVICE_CLIENT_ID")
        return self

    @property
    def agent_credentials_set(self) -> bool:
        return bool(self.agent_service_api_key.get_secret_value() or self.agent_service_client_id)

    @cached_property
    def allowed_origins(self) -> frozenset[str]:
        return frozenset(o.strip().rstrip("/") for o in self.ws_allowed_origins.split(",") if o.strip())

    @property
    def should_migrate_on_start(self) -> bool:
        migrate = self.migrate_on_start
        return migrate if migrate is not None else is_sqlite(self.conversation_database_url)

    @property
    def uses_dev_jwt_secret(self) -> bool:
        return self.auth_jwt_secret.get_secret_value() == DEV_JWT_SECRET

    def warn_about_defaults(self) -> None:
        if self.uses_dev_jwt_secret and not self.oidc.enabled:
            log.warning("AUTH_JWT_SECRET is not set: using the public development secret; set it for any real use")
