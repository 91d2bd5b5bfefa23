"""The ConversationService's started parts: one builder per part, entered in order on the lifespan's
one ``AsyncExitStack``, so a start that fails half-way closes what it had opened, and shutdown
closes everything in reverse (replies and turns stop before the frame writer's last flush, the
writer before the hub, the hub before the database).

Each part is put on ``app.state`` under its name (``storage``, ``realtime``, ``agent``...), typed by
``db/storage.py``, ``realtime/parts.py`` and the dataclass below; requests reach them through the
``Annotated`` dependencies of ``deps`` (the service-wide ones) and of each package's ``deps.py``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from urllib.parse import parse_qsl

import httpx
from fastapi import FastAPI

from conversation_service.a2a_agents.client import A2AAgentClient
from conversation_service.a2a_agents.target import A2ATarget
from conversation_service.agent_client import AgentServiceClient
from conversation_service.agent_delegation.dispatcher import AgentReplyDispatcher
from conversation_service.agent_delegation.failures import TurnFailures
from conversation_service.agent_delegation.processor import AgentEventProcessor
from conversation_service.agent_delegation.service import AgentDelegation
from conversation_service.agent_delegation.takeover import TurnTakeover
from conversation_service.agent_delegation.targets import AgentTargets
from conversation_service.auth.authenticator import DevelopmentTokens, ProviderTokens
from conversation_service.auth.guard import Authentication
from conversation_service.auth.login import LoginFlow
from conversation_service.auth.sessions import WebSessions
from conversation_service.db import migrate
from conversation_service.db.storage import Storage
from conversation_service.dead_letters.replay import DeadLetterReplayer
from conversation_service.direct_llm.replier import DirectLLMReplier
from conversation_service.history.extractor import HistoryExtractor
from conversation_service.history.repository import DatabaseSummaryCache
from conversation_service.interactions.expiry import QuestionExpiry
from conversation_service.interactions.service import AnswerService
from conversation_service.messages.service import MessageService
from conversation_service.metrics import ConversationMetrics
from conversation_service.realtime.hub import Hub, InProcessHub, RedisHub
from conversation_service.realtime.parts import Realtime
from conversation_service.realtime.publisher import FramePublisher
from conversation_service.realtime.repository import FrameRepository
from conversation_service.realtime.reservations import SeqReservations
from conversation_service.realtime.seq import InProcessSeqAllocator, RedisSeqAllocator, SeqAllocator
from conversation_service.realtime.writer import FrameWriter
from conversation_service.replies.ender import ReplyEnder
from conversation_service.reply_control.service import ReplyControl
from conversation_service.resilience.breaker_metrics import A2AAgentBreakersCollector, BreakerCollector
from conversation_service.resilience.health import AgentHealthMonitor
from conversation_service.routing.router import MessageRouter
from conversation_service.settings import ConversationSettings
from conversation_service.tasks import TaskSupervisor, every
from conversation_service.turns.admission import turn_admission
from conversation_service.turns.leases import TurnLeases
from conversation_service.turns.observe import TurnObserver
from shared.breaker import BreakerState, CircuitBreaker
from shared.db import create_engine, create_lease_engine, create_sessionmaker
from shared.fastpath.aiohttp_transport import AiohttpTransport
from shared.fastpath.coalesce import split_budget
from shared.http_metrics import install_http_metrics
from shared.llm.base import LLMProvider
from shared.llm.config import build_provider
from shared.oidc.client_credentials import ClientCredentialsAuth
from shared.oidc.provider import IdentityProvider
from shared.oidc.token_endpoint import TokenEndpoint
from shared.oidc.verifier import AccessTokenVerifier
from shared.rate_limit import RateLimiter, build_limiter, default_model
from shared.serving import Shutdown
from shared.tracing import Tracing, TracingOff
from shared.tracing.config import TracingConfig, build_tracing
from shared.tracing.db import trace_engine
from shared.tracing.genai import traced_provider
from shared.tracing.http_client import traced_transport
from shared.tracing.logs import install_log_ids
from shared.transactions import Transactions, transaction

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AgentParts:
    """Agent delegation: the breaker and the Agent Service's health, the turns, the ASK_USER side."""

    breaker: CircuitBreaker
    health: AgentHealthMonitor
    delegation: AgentDelegation
    dispatcher: AgentReplyDispatcher
    answers: AnswerService
    targets: AgentTargets  # who answers: the Agent Service or an A2A agent


def lifespan(settings: ConversationSettings) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def run(app: FastAPI) -> AsyncIterator[None]:
        settings.warn_about_defaults()
        metrics = app.state.metrics = ConversationMetrics()
        install_http_metrics(app, metrics.registry)
        async with AsyncExitStack() as stack:
            tracing = build_tracing_of(stack, app, settings)
            storage = app.state.storage = await stack.enter_async_context(build_storage(settings, tracing))
            # Released last but for the database: after the turns were stopped and their frames flushed.
            leases = app.state.leases = await stack.enter_async_context(
                build_leases(settings, storage, metrics, tracing))
            llm = await stack.enter_async_context(build_llm(settings, tracing))
            realtime = app.state.realtime = await stack.enter_async_context(
                build_realtime(settings, storage, metrics))
            auth = app.state.auth = await stack.enter_async_context(build_auth(settings, storage, metrics))
            client_config = settings.delegation.client_config()
            agent_auth = _agent_service_auth(settings, auth)
            client = await stack.enter_async_context(AgentServiceClient(
                settings.agent_service_url,
                settings.agent_service_api_key.get_secret_value() or (None if agent_auth else "unset"),
                config=client_config,
                transport=traced_transport(tracing, AiohttpTransport(max_connections=client_config.max_connections)),
                auth=agent_auth,
            ))
            app.state.agent_client = client  # the memory routes ask the Agent Service directly
            targets = await stack.enter_async_context(build_targets(settings, client, metrics, tracing))
            # Replies and turns under way stop before the client they use closes.
            tasks = app.state.tasks = await stack.enter_async_context(TaskSupervisor(app.state.shutdown))
            replies = ReplyEnder(storage.transactions, realtime.publisher)
            replier = DirectLLMReplier(
                storage.transactions, llm, realtime.publisher, metrics.direct, replies,
                history_messages=settings.direct_history_messages,
                system_prompt=settings.direct_llm_system_prompt, max_tokens=settings.direct_llm_max_tokens,
                limiter=build_rate_limits(stack, settings),
                model=default_model(settings.llm, llm), stops=leases.stops,
                # STREAM_COALESCE_MS is shared by the model's read window (build_llm) and the chunk's hold.
                stream_coalesce_ms=split_budget(settings.stream_coalesce_ms)[0],
            )
            agent = app.state.agent = await stack.enter_async_context(
                build_agent(settings, storage, realtime, llm, targets, replier, replies, tasks, leases, metrics,
                            tracing))
            app.state.dead_letters = DeadLetterReplayer(storage.sessionmaker, agent.delegation, tasks, leases)
            messages = app.state.messages = MessageService(
                storage.sessionmaker, realtime.publisher, agent.dispatcher, metrics.messages, leases,
                max_chars=settings.max_message_chars, tasks=tasks, admission=turn_admission(settings, metrics.turns),
            )
            app.state.reply_control = ReplyControl(storage.sessionmaker, realtime.publisher, leases, messages,
                                                   agent.targets, flush_frames=realtime.writer.flush)
            yield

    return run


def build_tracing_of(stack: AsyncExitStack, app: FastAPI, settings: ConversationSettings) -> Tracing | TracingOff:
    """This process's tracer provider (one per worker), closed last: the spans of the replies that
    ended on shutdown are exported within what is left of the grace period."""
    tracing = app.state.tracing = build_tracing(
        "conversation_service", TracingConfig.from_env(), trust_client_context=settings.tracing_trust_client_context)
    if tracing.enabled:
        install_log_ids()
        shutdown: Shutdown = app.state.shutdown
        stack.push_async_callback(lambda: tracing.aclose(max(shutdown.remaining(), 0.5)))
    return tracing


@asynccontextmanager
async def build_storage(settings: ConversationSettings, tracing: Tracing | TracingOff) -> AsyncIterator[Storage]:
    engine = create_engine(settings.conversation_database_url, pool_size=settings.database_pool_size)
    trace_engine(engine, tracing)
    lease_engine = create_lease_engine(settings.conversation_database_url)
    try:
        if settings.should_migrate_on_start:
            await migrate.upgrade(engine)
        sessionmaker = create_sessionmaker(engine)
        yield Storage(engine, sessionmaker, create_sessionmaker(lease_engine) if lease_engine else sessionmaker,
                      Transactions(sessionmaker, budget_s=settings.durable_write_budget_s))
    finally:
        if lease_engine is not None:
            await lease_engine.dispose()
        await engine.dispose()


@asynccontextmanager
async def build_auth(
    settings: ConversationSettings, storage: Storage, metrics: ConversationMetrics
) -> AsyncIterator[Authentication]:
    """Development tokens, or the identity provider: its keys (fetched in the background, so a
    provider that is down does not hold the start-up), and with a client id the page's sign-in."""
    oidc = settings.oidc
    if not oidc.enabled:
        yield Authentication(DevelopmentTokens(settings.auth_jwt_secret.get_secret_value(),
                                               leeway_s=settings.auth_jwt_leeway_s), settings.allowed_origins)
        return
    async with httpx.AsyncClient(follow_redirects=False, timeout=oidc.http_timeout_s) as http:
        provider = IdentityProvider(oidc, http, on_fetch=metrics.oidc.fetched)
        provider.start()
        try:
            verifier = AccessTokenVerifier(oidc, provider, on_reject=metrics.oidc.rejected)
            auth = Authentication(ProviderTokens(verifier, leeway_s=oidc.leeway_s), settings.allowed_origins,
                                  provider=provider, http=http)
            if not oidc.login_enabled:
                yield auth
                return
            if oidc.client_id == oidc.audience:
                # Its ID tokens are then for the API's audience too: refused as bearers by their claims
                # (shared.oidc.verifier), but an API of its own is the registration to have.
                log.warning(
                    "AUTH_OIDC_AUDIENCE equals AUTH_OIDC_CLIENT_ID: the sign-in client's ID tokens name the API "
                    "as their audience; register the API with an audience of its own (docs/operations.md)"
                )
            endpoint = TokenEndpoint(provider, http, oidc.client_id or "", oidc.client_secret.get_secret_value(),
                                     timeout_s=oidc.http_timeout_s)
            login = LoginFlow(oidc, verifier, endpoint, login_timeout_s=settings.session.login_timeout_s)
            sessions = WebSessions(storage.sessionmaker, login, settings.session)
            async with every(settings.session.cleanup_interval_s, sessions.remove_expired, name="auth-sessions"):
                yield Authentication(auth.bearer, settings.allowed_origins, provider=provider, http=http,
                                     login=login, sessions=sessions)
        finally:
            await provider.aclose()


def _agent_service_auth(settings: ConversationSettings, auth: Authentication) -> ClientCredentialsAuth | None:
    """The ConversationService's own access token for the Agent Service (client credentials), when set."""
    if not settings.agent_service_client_id or auth.provider is None or auth.http is None:
        return None
    endpoint = TokenEndpoint(
        auth.provider, auth.http, settings.agent_service_client_id,
        settings.agent_service_client_secret.get_secret_value(), timeout_s=settings.oidc.http_timeout_s,
    )
    return ClientCredentialsAuth(endpoint, dict(parse_qsl(settings.agent_service_grant_params)))


@asynccontextmanager
async def build_leases(
    settings: ConversationSettings, storage: Storage, metrics: ConversationMetrics, tracing: Tracing | TracingOff,
) -> AsyncIterator[TurnLeases]:
    """This replica's turn leases; on a graceful shutdown the unfinished turns are released for
    another replica to take over at once. Each turn is one span and one observed duration."""
    leases = TurnLeases(storage.sessionmaker, lease_s=settings.turn_lease_s, keeper_sessionmaker=storage.lease_sessionmaker,
                        write_budget_s=settings.durable_write_budget_s,
                        observer=TurnObserver(tracing, metrics.turns.duration_seconds))
    try:
        yield leases
    finally:
        try:
            await leases.release()
        except Exception:
            log.exception("could not release turn leases; they are taken over when they expire")


@asynccontextmanager
async def build_llm(settings: ConversationSettings, tracing: Tracing | TracingOff) -> AsyncIterator[LLMProvider]:
    """The LLM provider (direct replies, history summaries), with its pooled connections; traced
    (a GenAI span per call, ``traceparent`` on its requests) when tracing is on."""
    llm = build_provider(settings.llm, wrap_transport=partial(traced_transport, tracing) if tracing.enabled else None,
                         read_window_s=split_budget(settings.stream_coalesce_ms)[1])
    try:
        yield traced_provider(tracing, llm, default_model(settings.llm, llm))
    finally:
        await llm.aclose()


def build_rate_limits(stack: AsyncExitStack, settings: ConversationSettings) -> RateLimiter | None:
    """The Agent Service's limits (the same AGENT_SERVICE_RATE_LIMIT_* variables) on direct replies;
    with REDIS_URL they draw on the same budget as the agent's own calls."""
    limiter = build_limiter(settings.rate_limit, settings.redis_url)
    if limiter is not None:
        stack.push_async_callback(limiter.aclose)
    return limiter


@asynccontextmanager
async def build_realtime(
    settings: ConversationSettings, storage: Storage, metrics: ConversationMetrics
) -> AsyncIterator[Realtime]:
    writer = FrameWriter(
        storage.sessionmaker, interval=settings.frame_flush_interval_s, max_batch=settings.frame_flush_max_batch,
        queue_size=settings.frame_writer_queue_size, metrics=metrics.frames, retry_for_s=settings.durable_write_budget_s,
    )

    async def seq_floor(conversation_id: str) -> int:
        # Pending first: a frame committed (and no longer pending) during the read is in the read.
        pending = writer.pending_max(conversation_id)
        async with transaction(storage.sessionmaker) as session:
            persisted = await FrameRepository(session).max_seq(conversation_id)
        return max(persisted, pending)

    hub: Hub
    seq: SeqAllocator
    reservations = SeqReservations(storage.transactions)
    block = settings.frame_seq_block
    if settings.redis_url:
        hub = RedisHub(settings.redis_url, f"{settings.redis_channel_prefix}:frames",
                       dropped=metrics.frames.hub_dropped.inc)
        seq = RedisSeqAllocator(settings.redis_url, settings.redis_channel_prefix, seq_floor, reservations,
                                block=block)
    else:
        hub, seq = InProcessHub(), InProcessSeqAllocator(seq_floor, reservations, block=block)
    async with AsyncExitStack() as stack:
        stack.push_async_callback(seq.close)
        await hub.start()
        stack.push_async_callback(hub.close)
        writer.start()
        stack.push_async_callback(writer.close)
        yield Realtime(hub, seq, writer, FramePublisher(seq, writer, hub, metrics.frames))


def _routing(settings: ConversationSettings):
    if settings.routing.enabled and not settings.agent_credentials_set and not settings.a2a.agents:
        log.warning("neither AGENT_SERVICE_API_KEY nor AGENT_SERVICE_CLIENT_ID is set: agent routing is disabled")
        return settings.routing.model_copy(update={"enabled": False})
    return settings.routing


def _breaker(settings: ConversationSettings, metrics: ConversationMetrics, agent: str | None = None) -> CircuitBreaker:
    """The Agent Service's breaker (its state is a metric), or an A2A agent's (``agent``: its name)."""

    def changed(new_state: BreakerState) -> None:
        if agent is None:
            metrics.agent.breaker_transitions[new_state.value].inc()
        else:
            metrics.agent.a2a_breaker_transitions.labels(agent=agent, state=new_state.value).inc()
        log.warning("agent circuit breaker changed", extra={"breaker_state": new_state.value, "a2a_agent": agent})

    delegation = settings.delegation
    breaker = CircuitBreaker(
        failure_threshold=delegation.agent_breaker_failures, window_seconds=delegation.agent_breaker_window_s,
        open_seconds=delegation.agent_breaker_open_s, on_change=changed,
    )
    if agent is None:
        metrics.registry.register(BreakerCollector(breaker))
    return breaker


@asynccontextmanager
async def build_targets(
    settings: ConversationSettings, client: AgentServiceClient, metrics: ConversationMetrics,
    tracing: Tracing | TracingOff,
) -> AsyncIterator[AgentTargets]:
    """The Agent Service and the A2A agents of ``A2A_AGENTS``, each with its breaker and its pool."""
    config = settings.delegation.client_config()

    def transport() -> httpx.AsyncBaseTransport | None:
        # Traced, a call to an A2A agent carries the turn's traceparent as the Agent Service's does.
        limits = httpx.Limits(max_connections=config.max_connections,
                              max_keepalive_connections=config.max_keepalive_connections)
        return traced_transport(tracing, httpx.AsyncHTTPTransport(limits=limits)) if tracing.enabled else None

    a2a = {agent.name: A2ATarget(A2AAgentClient(agent, config, card_cache_s=settings.a2a.card_cache_s,
                                                transport=transport()))
           for agent in settings.a2a.agents}
    targets = AgentTargets(client, _breaker(settings, metrics), a2a, settings.a2a,
                           lambda name: _breaker(settings, metrics, name))
    metrics.registry.register(A2AAgentBreakersCollector(targets.a2a_breakers))
    try:
        yield targets
    finally:
        for target in a2a.values():
            await target.client.aclose()


@asynccontextmanager
async def build_agent(
    settings: ConversationSettings, storage: Storage, realtime: Realtime, llm: LLMProvider,
    targets: AgentTargets, replier: DirectLLMReplier, replies: ReplyEnder, tasks: TaskSupervisor,
    leases: TurnLeases, metrics: ConversationMetrics, tracing: Tracing | TracingOff,
) -> AsyncIterator[AgentParts]:
    """The agent path; its background jobs (question expiry, health checks, turn lease renewal and
    takeover) run while the block does."""
    config = settings.delegation
    sessionmaker, publisher = storage.sessionmaker, realtime.publisher
    client, breaker = targets.client, targets.breaker(None)
    health = AgentHealthMonitor(client, breaker, metrics.agent, cache_s=config.agent_health_cache_s)
    expiry = QuestionExpiry(sessionmaker, publisher, metrics.agent, batch=config.agent_cleanup_batch)
    history = HistoryExtractor(
        settings.history, llm=llm, summary_cache=DatabaseSummaryCache(sessionmaker), registry=metrics.registry
    )
    processor = AgentEventProcessor(
        storage.transactions, publisher, metrics.agent, replies,
        queue_size=config.agent_event_queue_size, ask_user_timeout_s=config.ask_user_timeout_s,
    )
    failures = TurnFailures(transactions=storage.transactions, processor=processor, metrics=metrics.agent)
    delegation = AgentDelegation(
        transactions=storage.transactions, targets=targets, history=history, processor=processor,
        replier=replier, publisher=publisher, metrics=metrics.agent, settings=config, tasks=tasks, leases=leases,
        failures=failures, tracing=tracing,
    )
    dispatcher = AgentReplyDispatcher(
        sessionmaker=sessionmaker, targets=targets,
        router=MessageRouter(_routing(settings), registry=metrics.registry, agent_names=targets.names),
        delegation=delegation, expiry=expiry, replier=replier, tasks=tasks, leases=leases,
        chat_message_answers=config.ask_user_chat_message_is_answer,
    )
    answers = AnswerService(sessionmaker, publisher, expiry, delegation, metrics.agent, leases,
                            max_chars=settings.max_message_chars)
    takeover = TurnTakeover(
        transactions=storage.transactions, leases=leases, dispatcher=dispatcher, delegation=delegation,
        processor=processor, targets=targets, replies=replies, tasks=tasks, metrics=metrics.agent, failures=failures,
    )
    async with (
        every(config.agent_cleanup_interval_s, expiry.expire_all_due, name="ask-user-expiry"),
        every(max(config.agent_health_cache_s, 5.0), health.check, name="agent-health"),
        every(settings.turn_lease_s / 3, leases.renew, name="turn-lease-renewal"),
        every(settings.turn_sweep_interval_s, takeover.sweep, name="turn-takeover"),
    ):
        yield AgentParts(breaker, health, delegation, dispatcher, answers, targets)
