"""The Agent Service application: ``create_app(settings)``.

The lifespan reads top to bottom: one builder per part, entered on one ``AsyncExitStack`` in the
order the parts depend on each other, so that shutdown, and a start that fails half-way, close in
reverse what was opened. The routes reach the parts (``AgentState``) through the ``deps`` modules. A provider or tool set handed
in (tests, another host) is used as is and left open; by default both are built from the settings.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import httpx
from fastapi import FastAPI
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from agent_service import health
from agent_service.a2a import jsonrpc as a2a_jsonrpc
from agent_service.a2a import router as a2a_router
from agent_service.a2a.reader import TaskReader
from agent_service.a2a.service import A2AService
from agent_service.a2a.streams import TaskStreams
from agent_service.a2a.transport import A2AParts
from agent_service.access.resolver import CallerResolver
from agent_service.errors import install_error_handlers
from agent_service.events.event_log import EventLog
from agent_service.events.live_tail import build_notifier
from agent_service.events.streaming import EventStreamer, StreamSettings
from agent_service.hooks.loading import load_hooks
from agent_service.hooks.runner import HookRunner
from agent_service.mcp_server.route import MCPRoute
from agent_service.memory import router as memory_router
from agent_service.memory.health import MemoryHealth
from agent_service.memory.recall import LongTermMemory
from agent_service.memory.sql_store import SqlMemoryStore
from agent_service.metrics import AgentMetrics
from agent_service.migrate import run_migrations
from agent_service.profiles import router as profiles_router
from agent_service.profiles.service import ProfileStore
from agent_service.runs import router as runs_router
from agent_service.runs.admission import run_admission
from agent_service.runs.continuation import RunContinuation
from agent_service.runs.engine import ReActEngine, ToolLookup, find_tool
from agent_service.runs.leases import LeaseKeeper, new_owner_id
from agent_service.runs.manager import RunManager
from agent_service.runs.service import RunService
from agent_service.sessions import router as sessions_router
from agent_service.sessions.service import SessionService
from agent_service.settings import AgentServiceSettings
from agent_service.tools.knowledge.indexer import index_knowledge
from agent_service.tools.registry import build_registry
from shared import tokens
from shared.api_docs import install_api_docs
from shared.body_limit import BodySizeLimitMiddleware
from shared.db import create_engine, create_lease_engine, create_sessionmaker
from shared.fastpath.coalesce import split_budget
from shared.fastpath.direct_body import DirectBodyMiddleware
from shared.heap_profile import install_heap_profile
from shared.http_contract import install_openapi
from shared.http_metrics import HttpMetricsMiddleware, install_http_metrics
from shared.llm.base import LLMProvider
from shared.llm.config import build_provider
from shared.logging import RequestIdMiddleware
from shared.rate_limit import RateLimiter, build_limiter, default_model
from shared.serving import Shutdown
from shared.tracing import NO_TRACING, Tracing, TracingOff
from shared.tracing.asgi import TracingMiddleware
from shared.tracing.config import TracingConfig, build_tracing
from shared.tracing.db import trace_engine
from shared.tracing.genai import traced_provider
from shared.tracing.http_client import traced_transport
from shared.tracing.logs import install_log_ids

if TYPE_CHECKING:
    from shared.oidc.verifier import AccessTokenVerifier

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AgentState:
    """What the lifespan started, on ``app.state.agent``; the routes read it through the ``Annotated``
    aliases of ``deps.py`` and of each domain (beside its router, or in its ``deps.py``)."""

    settings: AgentServiceSettings
    metrics: AgentMetrics
    db_engine: AsyncEngine
    profiles: ProfileStore
    run_manager: RunManager
    lease_keeper: LeaseKeeper
    run_service: RunService
    session_service: SessionService
    streamer: EventStreamer
    # None when AGENT_SERVICE_MEMORY_ENABLED is off.
    memory: LongTermMemory | None = None
    # Who each credential is (API keys, and with AGENT_SERVICE_AUTH_OIDC_ISSUER access tokens).
    callers: CallerResolver | None = None
    # The A2A server's parts (its routes reach them through ``agent_service.a2a.transport.parts``).
    a2a: A2AParts | None = None
    # The MCP servers whose tools profiles offer (agent_service.mcp.service.MCPTools); None: none configured.
    mcp: Any = None
    # The agent as an MCP server at /mcp (agent_service.mcp_server.endpoint.MCPEndpoint); None: turned off.
    mcp_door: Any = None


def build_tracing_of(stack: AsyncExitStack, app: FastAPI, config: TracingConfig) -> Tracing | TracingOff:
    """This process's tracer provider (one per worker), closed last: the spans of the runs that
    ended on shutdown are exported within what is left of the grace period. Its callers are services
    (the ConversationService, A2A clients with a key): their trace context is continued."""
    tracing = app.state.tracing = build_tracing("agent_service", config, trust_client_context=True)
    if tracing.enabled:
        install_log_ids()
        shutdown: Shutdown = app.state.shutdown
        stack.push_async_callback(lambda: tracing.aclose(max(shutdown.remaining(), 0.5)))
    return tracing


async def build_storage(
    stack: AsyncExitStack, settings: AgentServiceSettings, tracing: Tracing | TracingOff,
) -> AsyncEngine:
    db_engine = create_engine(settings.database_url)
    stack.push_async_callback(db_engine.dispose)
    trace_engine(db_engine, tracing)
    if settings.should_migrate_on_start:
        await run_migrations(db_engine)
    return db_engine


async def build_tools(
    settings: AgentServiceSettings, sessionmaker: async_sessionmaker, profiles: ProfileStore, tools: ToolLookup | None,
) -> ToolLookup:
    """The built-in tools, with the knowledge folder (re)indexed into the database first; start-up
    fails when a profile names a tool there is not."""
    if tools is None:
        await index_knowledge(sessionmaker, settings.knowledge_dir)
        tools = build_registry(sessionmaker, artifact_max_bytes=settings.artifact_max_bytes)
    profiles.check_tools(lambda name: find_tool(tools, name) is not None)
    return tools


async def build_mcp_tools(
    stack: AsyncExitStack, settings: AgentServiceSettings, profiles: ProfileStore, metrics: AgentMetrics,
    tools: ToolLookup,
) -> tuple[ToolLookup, Any]:
    """The MCP servers' tools beside the built-in ones, when servers are configured. Imported only
    then: the MCP SDK takes a third of a second to import, which a deployment without it never pays."""
    if not (settings.mcp_servers or settings.mcp_servers_file or any(p.mcp for p in profiles.configured())):
        return tools, None
    from agent_service.mcp.metrics import MCPMetrics
    from agent_service.mcp.service import ToolsWithMCP, build_mcp

    mcp = await build_mcp(stack, settings, profiles, MCPMetrics(metrics.registry), tools)
    return (tools, None) if mcp is None else (ToolsWithMCP(tools, mcp), mcp)


def build_hooks(stack: AsyncExitStack, settings: AgentServiceSettings, metrics: AgentMetrics) -> HookRunner:
    """The lifecycle hooks the settings and installed entry points name, closed when the service stops."""
    hooks = load_hooks(settings)
    runner = HookRunner(hooks, timeout_s=settings.hook_timeout_seconds, metrics=metrics)
    stack.push_async_callback(runner.aclose)
    if hooks:
        log.info("lifecycle hooks loaded", extra={"hooks": [hook.name for hook in hooks]})
    return runner


def build_rate_limits(stack: AsyncExitStack, settings: AgentServiceSettings) -> RateLimiter | None:
    """The limiter on model calls; counted in Redis when ``REDIS_URL`` is set, so replicas share one budget."""
    limiter = build_limiter(settings.rate_limit, settings.redis_url)
    if limiter is not None:
        stack.push_async_callback(limiter.aclose)
        log.info("rate limits on model calls", extra={"shared": settings.redis_url is not None})
    return limiter


def build_memory(
    stack: AsyncExitStack, settings: AgentServiceSettings, sessionmaker: async_sessionmaker, metrics: AgentMetrics,
) -> LongTermMemory | None:
    """Long-term memory on the service's database, its health exported as ``agent_memory_health``; on
    shutdown (after the runs, before the database) its queued writes are drained within a bound."""
    if not settings.memory_enabled:
        return None
    health = MemoryHealth(
        normal_k=settings.memory_top_k, degraded_k=settings.memory_degraded_top_k,
        degraded_window_s=settings.memory_degraded_window_seconds, fail_max=settings.memory_fail_max,
        reset_timeout_s=settings.memory_reset_timeout_seconds,
    )
    metrics.memory_health.set_function(lambda: float(health.state()))
    memory = LongTermMemory(
        SqlMemoryStore(sessionmaker), health, metrics.memory_failures, metrics.memory_writes_dropped,
        token_budget=settings.memory_token_budget, recency_half_life_s=settings.memory_recency_half_life_hours * 3600,
        timeout_s=settings.memory_timeout_seconds, write_queue_size=settings.memory_write_queue_size,
    )
    memory.start()
    stack.push_async_callback(memory.aclose, settings.memory_drain_seconds)
    return memory


def build_model(
    stack: AsyncExitStack, settings: AgentServiceSettings, provider: LLMProvider | None, metrics: AgentMetrics,
    tracing: Tracing | TracingOff,
) -> LLMProvider:
    """The model (traced: a GenAI span per call, ``traceparent`` on its requests, when tracing is on)."""
    if provider is None:
        provider = build_provider(
            settings.llm, on_wait=metrics.llm_connection_wait.observe, on_waiters=metrics.llm_connection_waiters.set,
            wrap_transport=partial(traced_transport, tracing) if tracing.enabled else None,
            read_window_s=split_budget(settings.stream_coalesce_ms)[1],
        )
        stack.push_async_callback(provider.aclose)
    return traced_provider(tracing, provider, default_model(settings.llm, provider))


async def build_runs(
    stack: AsyncExitStack, settings: AgentServiceSettings, sessionmaker: async_sessionmaker, engine: ReActEngine,
    metrics: AgentMetrics, tracing: Tracing | TracingOff, profiles: ProfileStore,
) -> tuple[EventLog, RunManager, LeaseKeeper]:
    """The event log, the runs of this process and the keeper of their leases; runs a previous stop
    left behind are continued (or ended) before the service takes requests."""
    notifier = build_notifier(
        make_url(settings.database_url), fallback_poll_s=settings.follow_fallback_poll_seconds,
        local_poll_s=settings.replay_poll_seconds, received=metrics.live_tail_notifications,
    )
    await notifier.start()
    stack.push_async_callback(notifier.aclose)
    event_log = EventLog(
        sessionmaker, group_commit_ms=settings.group_commit_ms, live_queue_size=settings.live_queue_size, metrics=metrics,
        seq_block=settings.seq_reserve_block, notifier=notifier,
        durable_write_budget_s=settings.durable_write_budget_seconds, max_pending=settings.event_log_max_pending,
    )
    event_log.start()
    stack.push_async_callback(event_log.aclose)
    manager = RunManager(
        sessionmaker=sessionmaker, event_log=event_log, engine=engine, metrics=metrics, owner_id=new_owner_id(),
        lease_seconds=settings.lease_seconds, snapshot_max_bytes=settings.session_snapshot_max_bytes, tracing=tracing,
        hand_over=settings.max_continuations > 0,
    )
    event_log.lease_to(manager.owner_id, manager.taken_over_runs)
    # Renewals on a pool of their own: never late because every request holds a connection.
    lease_engine = create_lease_engine(settings.database_url)
    if lease_engine is not None:
        stack.push_async_callback(lease_engine.dispose)
    continuation = RunContinuation(
        manager=manager, event_log=event_log, profiles=profiles, tools=engine.tools, metrics=metrics,
        max_continuations=settings.max_continuations,
    )
    keeper = LeaseKeeper(
        sessionmaker=create_sessionmaker(lease_engine) if lease_engine is not None else sessionmaker,
        manager=manager, event_log=event_log, metrics=metrics, renew_seconds=settings.lease_renew_seconds,
        continuation=continuation,
    )
    stack.push_async_callback(keeper.aclose)
    # Only runs whose lease expired: other replicas' live runs are left alone. Runs of a process
    # that died moments ago are taken by a later pass, once their lease runs out.
    recovered = await keeper.recover()
    if recovered:
        log.warning("took over runs a previous stop left", extra={"count": recovered})
    keeper.start()
    # First to run on shutdown: the keeper still renews while the runs end, so no replica takes them.
    stack.push_async_callback(manager.shutdown)
    return event_log, manager, keeper


async def build_token_verifier(
    stack: AsyncExitStack, settings: AgentServiceSettings, metrics: AgentMetrics
) -> AccessTokenVerifier | None:
    """Access tokens of the identity provider, when one is configured. Its keys are fetched in the
    background: a provider that is down does not hold the start-up."""
    oidc = settings.auth_oidc
    if not oidc.enabled:
        return None
    # Imported only here: a process that verifies no tokens does not load PyJWT (see
    # tests/unit/architecture/test_start_up_imports.py).
    from shared.oidc.metrics import OIDCMetrics
    from shared.oidc.provider import IdentityProvider
    from shared.oidc.verifier import AccessTokenVerifier

    http = await stack.enter_async_context(httpx.AsyncClient(follow_redirects=False, timeout=oidc.http_timeout_s))
    oidc_metrics = OIDCMetrics(metrics.registry, "agent")
    provider = IdentityProvider(oidc, http, on_fetch=oidc_metrics.fetched)
    provider.start()
    stack.push_async_callback(provider.aclose)
    return AccessTokenVerifier(oidc, provider, on_reject=oidc_metrics.rejected)


async def build_agent(
    stack: AsyncExitStack, app: FastAPI, settings: AgentServiceSettings, provider: LLMProvider | None,
    tools: ToolLookup | None,
) -> AgentState:
    metrics = AgentMetrics()
    install_http_metrics(app, metrics.registry)
    # Runs count tokens (the memory's budget, rate limits, the usage a model does not send): loading the
    # tokenizer at the first count held the event loop for up to a second in the middle of a burst.
    tokens.warm()
    tracing = build_tracing_of(stack, app, TracingConfig.from_env())
    db_engine = await build_storage(stack, settings, tracing)
    sessionmaker = create_sessionmaker(db_engine)
    profiles = ProfileStore.from_file(settings.profiles_file)
    tools = await build_tools(settings, sessionmaker, profiles, tools)
    tools, mcp = await build_mcp_tools(stack, settings, profiles, metrics, tools)
    provider = build_model(stack, settings, provider, metrics, tracing)
    memory = build_memory(stack, settings, sessionmaker, metrics)
    engine = ReActEngine(
        provider, tools, metrics, ask_user_timeout_s=settings.ask_user_timeout_seconds,
        tool_timeout_s=settings.tool_timeout_seconds, max_tool_result_chars=settings.max_tool_result_chars,
        hooks=build_hooks(stack, settings, metrics), limiter=build_rate_limits(stack, settings),
        default_model=default_model(settings.llm, provider), memory=memory, tracing=tracing,
        # STREAM_COALESCE_MS is shared by the model's read window (build_model) and the chunk's hold.
        stream_coalesce_ms=split_budget(settings.stream_coalesce_ms)[0],
    )
    event_log, manager, keeper = await build_runs(stack, settings, sessionmaker, engine, metrics, tracing, profiles)
    callers = CallerResolver(settings, await build_token_verifier(stack, settings, metrics))
    callers.describe()
    run_service = RunService(
        settings=settings, sessionmaker=sessionmaker, profiles=profiles, manager=manager, event_log=event_log,
        admission=run_admission(settings, metrics), tracing=tracing,
    )
    session_service = SessionService(settings=settings, sessionmaker=sessionmaker, manager=manager, event_log=event_log)
    streamer = EventStreamer(
        event_log, sessionmaker,
        StreamSettings(heartbeat_seconds=settings.heartbeat_seconds, retry_ms=settings.sse_retry_ms),
        metrics, stopping=app.state.shutdown.begun,
    )
    mcp_door = await build_mcp_server(stack, settings, profiles, run_service, session_service, streamer, callers)
    return AgentState(
        settings=settings, metrics=metrics, db_engine=db_engine, profiles=profiles,
        run_manager=manager, lease_keeper=keeper, run_service=run_service, session_service=session_service,
        streamer=streamer, memory=memory, callers=callers, mcp=mcp, mcp_door=mcp_door,
        a2a=build_a2a(
            settings, profiles, run_service, session_service, streamer, event_log, sessionmaker,
            stopping=app.state.shutdown.begun,
        ),
    )


async def build_mcp_server(
    stack: AsyncExitStack, settings: AgentServiceSettings, profiles: ProfileStore, run_service: RunService,
    session_service: SessionService, streamer: EventStreamer, callers: CallerResolver,
) -> Any:
    """The agent as an MCP server (``/mcp``), unless turned off; the SDK is imported only then."""
    if not settings.mcp_server_enabled:
        return None
    from agent_service.mcp_server.door import AgentDoor
    from agent_service.mcp_server.endpoint import build_endpoint

    if settings.mcp_server_profile not in {profile.name for profile in profiles.configured()}:
        log.warning("AGENT_SERVICE_MCP_SERVER_PROFILE names no profile: ask without a profile is refused",
                    extra={"profile": settings.mcp_server_profile})
    door = AgentDoor(profiles=profiles, default_profile=settings.mcp_server_profile, runs=run_service,
                     sessions=session_service, streamer=streamer)
    return await build_endpoint(stack, settings, door, callers)


def build_a2a(
    settings: AgentServiceSettings, profiles: ProfileStore, run_service: RunService, session_service: SessionService,
    streamer: EventStreamer, event_log: EventLog, sessionmaker: async_sessionmaker, *, stopping: asyncio.Event,
) -> A2AParts:
    """The A2A server on top of the runs and sessions (it keeps no state of its own)."""
    if settings.a2a_profile not in {profile.name for profile in profiles.all()}:
        log.warning("AGENT_SERVICE_A2A_PROFILE names no profile: A2A messages without a skillId are refused",
                    extra={"profile": settings.a2a_profile})
    service = A2AService(
        settings=settings, runs=run_service, sessions=session_service, reader=TaskReader(sessionmaker, event_log),
        streamer=streamer, event_log=event_log,
    )
    streams = TaskStreams(
        service, session_service, event_log, heartbeat_s=settings.heartbeat_seconds, stopping=stopping,
    )
    return A2AParts(settings=settings, service=service, streams=streams)


def create_app(
    settings: AgentServiceSettings | None = None, *, provider: LLMProvider | None = None,
    tools: ToolLookup | None = None,
) -> FastAPI:
    settings = settings or AgentServiceSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            app.state.agent = await build_agent(stack, app, settings, provider, tools)
            yield

    app = FastAPI(title="TaskForce Agent Service", version="1.0", lifespan=lifespan, docs_url=None, redoc_url=None)
    # Begun by the server on SIGTERM (``shared.serving``): SSE streams end on it.
    app.state.shutdown = Shutdown(settings.shutdown_grace_s)
    app.state.tracing = NO_TRACING  # until the lifespan has built this process's tracer provider
    install_api_docs(app)  # /docs with its files served from here: it works offline
    install_openapi(app)  # the document defines the ErrorBody every error answer is
    install_error_handlers(app)
    for module in (health, runs_router, sessions_router, profiles_router, memory_router, a2a_router, a2a_jsonrpc):
        app.include_router(module.router)
    # The agent as an MCP server; not in the OpenAPI document (MCP describes itself: tools/list).
    app.router.add_route("/mcp", MCPRoute(), methods=["GET", "POST", "DELETE"], include_in_schema=False)
    install_heap_profile(app, settings.debug)  # only with DEBUG_HEAP_PROFILE=1
    # The A2A bindings refuse an oversized body in their own error format.
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes, render=a2a_jsonrpc.too_large)
    app.add_middleware(RequestIdMiddleware)
    # Outermost, so the count includes answers of the other middleware (413) and unhandled errors.
    app.add_middleware(HttpMetricsMiddleware)
    if TracingConfig.from_env().enabled:  # off: no middleware at all
        app.add_middleware(TracingMiddleware)
    # Records the server's send for the SSE bodies, which skip the wrappers above (``direct_body``).
    app.add_middleware(DirectBodyMiddleware)
    return app
