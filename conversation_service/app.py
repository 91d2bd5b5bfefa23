"""The ConversationService application: ``create_app(settings)``.

The lifespan creates every resource (engine, sessionmaker, pooled HTTP client, LLM provider, hub,
seq allocator, frame writer, background tasks) and closes them in reverse order.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from conversation_service.agent_client import AgentServiceClient
from conversation_service.agent_delegation.breaker import BreakerState, CircuitBreaker
from conversation_service.agent_delegation.breaker_metrics import BreakerCollector
from conversation_service.agent_delegation.cleanup import QuestionExpiryJob
from conversation_service.agent_delegation.dispatcher import AgentReplyDispatcher
from conversation_service.agent_delegation.health import AgentHealthMonitor
from conversation_service.agent_delegation.processor import AgentEventProcessor
from conversation_service.agent_delegation.router import router as agent_router
from conversation_service.agent_delegation.service import AgentDelegation
from conversation_service.agent_delegation.settings import DelegationSettings
from conversation_service.conversations.router import router as conversations_router
from conversation_service.db import migrate
from conversation_service.db.repository import unit_of_work
from conversation_service.direct_llm.replier import DirectLLMReplier
from conversation_service.errors import install_error_handlers
from conversation_service.health import router as health_router
from conversation_service.history.extractor import HistoryExtractor
from conversation_service.history.repository import DatabaseSummaryCache
from conversation_service.history.settings import HistorySettings
from conversation_service.messages.dispatch import DirectReplyDispatcher, ReplyDispatcher
from conversation_service.messages.router import router as messages_router
from conversation_service.metrics import ConversationMetrics
from conversation_service.realtime.hub import Hub, InProcessHub, RedisHub
from conversation_service.realtime.publisher import FramePublisher
from conversation_service.realtime.repository import FrameRepository
from conversation_service.realtime.router import router as ws_router
from conversation_service.realtime.seq import InProcessSeqAllocator, RedisSeqAllocator, SeqAllocator
from conversation_service.realtime.writer import FrameWriter
from conversation_service.routing.router import MessageRouter
from conversation_service.routing.settings import RoutingSettings
from conversation_service.settings import ConversationSettings
from conversation_service.state import ServiceState
from conversation_service.tasks import TaskSupervisor
from shared.body_limit import BodySizeLimitMiddleware
from shared.db import create_engine, create_sessionmaker
from shared.fastpath.process import tune_process
from shared.heap_profile import install_heap_profile
from shared.http_metrics import HttpMetricsMiddleware, install_http_metrics
from shared.llm.base import LLMProvider
from shared.logging import RequestIdMiddleware

log = logging.getLogger(__name__)

UI_DIR = Path(__file__).resolve().parent / "ui"

# Builds the dispatcher from the started resources; the default routes between agent and LLM.
DispatcherFactory = Callable[[ServiceState], ReplyDispatcher]


def _default_dispatcher(state: ServiceState) -> ReplyDispatcher:
    return state.agent_dispatcher


def direct_only_dispatcher(state: ServiceState) -> ReplyDispatcher:
    """Every message to the direct LLM (used where the agent path is deliberately absent)."""
    return DirectReplyDispatcher(state.replier, state.tasks)


def _build_llm(http_client: httpx.AsyncClient) -> LLMProvider:
    from shared.llm.config import LLMSettings, build_provider

    return build_provider(LLMSettings(), http_client)


def create_app(
    settings: ConversationSettings | None = None,
    *,
    dispatcher_factory: DispatcherFactory = _default_dispatcher,
    delegation_settings: DelegationSettings | None = None,
    routing_settings: RoutingSettings | None = None,
    history_settings: HistorySettings | None = None,
    own_process: bool = False,
) -> FastAPI:
    """The ConversationService app. ``own_process``: the app is the process's service (``python -m
    conversation_service``), so it may tune the interpreter once started (``shared.fastpath.process``); an
    app embedded in another process (tests, a host application) leaves it alone."""
    settings = settings or ConversationSettings()
    delegation_settings = delegation_settings or DelegationSettings()
    routing_settings = routing_settings or RoutingSettings()
    history_settings = history_settings or HistorySettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        settings.warn_about_defaults()
        metrics = ConversationMetrics()
        install_http_metrics(app, metrics.registry)
        engine = create_engine(settings.conversation_database_url, pool_size=settings.database_pool_size)
        sessionmaker = create_sessionmaker(engine)
        if settings.should_migrate_on_start:
            await migrate.upgrade(engine)
        http_client = httpx.AsyncClient(timeout=httpx.Timeout(connect=5.0, read=60.0, write=10.0, pool=5.0))
        llm = _build_llm(http_client)
        writer = FrameWriter(
            sessionmaker,
            interval=settings.frame_flush_interval_s,
            max_batch=settings.frame_flush_max_batch,
            queue_size=settings.frame_writer_queue_size,
            metrics=metrics.frames,
        )

        async def seq_floor(conversation_id: str) -> int:
            # Pending first: a frame committed (and no longer pending) during the read is in the read.
            pending = writer.pending_max(conversation_id)
            async with unit_of_work(sessionmaker) as session:
                persisted = await FrameRepository(session).max_seq(conversation_id)
            return max(persisted, pending)

        hub: Hub
        seq: SeqAllocator
        if settings.redis_url:
            hub = RedisHub(settings.redis_url, f"{settings.redis_channel_prefix}:frames")
            seq = RedisSeqAllocator(settings.redis_url, settings.redis_channel_prefix, seq_floor)
        else:
            hub = InProcessHub()
            seq = InProcessSeqAllocator(seq_floor)
        await hub.start()
        await writer.start()
        publisher = FramePublisher(seq, writer, hub, metrics.frames)
        tasks = TaskSupervisor()
        replier = DirectLLMReplier(
            sessionmaker, llm, publisher, metrics.direct,
            history_messages=settings.direct_history_messages, system_prompt=settings.direct_system_prompt,
        )
        # Agent delegation: the SDK client (its own pool and timeouts), the breaker, routing, history.
        if settings.agent_routing_enabled and not settings.agent_service_api_key.get_secret_value():
            log.warning("AGENT_SERVICE_API_KEY is not set: agent routing is disabled")
            routing = routing_settings.model_copy(update={"enabled": False})
        else:
            routing = routing_settings.model_copy(
                update={"enabled": routing_settings.enabled and settings.agent_routing_enabled}
            )
        agent_client = AgentServiceClient(
            settings.agent_service_url,
            settings.agent_service_api_key.get_secret_value() or "unset",
            config=delegation_settings.client_config(),
        )

        def breaker_changed(new_state: BreakerState) -> None:
            metrics.agent.breaker_transitions[new_state.value].inc()
            log.warning("agent circuit breaker changed", extra={"breaker_state": new_state.value})

        breaker = CircuitBreaker(
            failure_threshold=delegation_settings.agent_breaker_failures,
            window_seconds=delegation_settings.agent_breaker_window_s,
            open_seconds=delegation_settings.agent_breaker_open_s,
            on_change=breaker_changed,
        )
        metrics.registry.register(BreakerCollector(breaker))
        history = HistoryExtractor(
            history_settings, llm=llm, summary_cache=DatabaseSummaryCache(sessionmaker), registry=metrics.registry
        )
        processor = AgentEventProcessor(
            sessionmaker, publisher, metrics.agent,
            queue_size=delegation_settings.agent_event_queue_size,
            ask_user_timeout_s=delegation_settings.ask_user_timeout_s,
        )
        delegation = AgentDelegation(
            sessionmaker=sessionmaker, client=agent_client, breaker=breaker, history=history, processor=processor,
            replier=replier, publisher=publisher, metrics=metrics, settings=delegation_settings,
        )
        agent_dispatcher = AgentReplyDispatcher(
            sessionmaker=sessionmaker, router=MessageRouter(routing, registry=metrics.registry), breaker=breaker,
            delegation=delegation, replier=replier, tasks=tasks,
        )
        expiry = QuestionExpiryJob(
            delegation, interval_s=delegation_settings.agent_cleanup_interval_s,
            batch=delegation_settings.agent_cleanup_batch,
        )
        state = ServiceState(
            settings=settings, engine=engine, sessionmaker=sessionmaker, http_client=http_client, llm=llm,
            hub=hub, publisher=publisher, tasks=tasks, replier=replier, dispatcher=None,  # type: ignore[arg-type]
            metrics=metrics, agent_client=agent_client, breaker=breaker, delegation=delegation,
            agent_dispatcher=agent_dispatcher, agent_health=AgentHealthMonitor(
                agent_client, breaker, metrics, cache_s=delegation_settings.agent_health_cache_s),
            question_expiry=expiry,
        )
        state.dispatcher = dispatcher_factory(state)
        app.state.services = state
        expiry.start()
        state.agent_health.start(max(delegation_settings.agent_health_cache_s, 5.0))
        if own_process:
            tune_process()
        try:
            yield
        finally:
            await state.agent_health.close()
            await expiry.close()
            await tasks.close()
            await agent_client.aclose()
            await writer.close()
            await hub.close()
            await seq.close()
            await llm.aclose()
            await http_client.aclose()
            await engine.dispose()

    app = FastAPI(
        title="ConversationService",
        version="1.0.0",
        description="Chat API: conversations, messages, and a live WebSocket stream per conversation.",
        lifespan=lifespan,
    )
    install_error_handlers(app)
    app.include_router(health_router)
    app.include_router(conversations_router)
    app.include_router(messages_router)
    app.include_router(agent_router)
    app.include_router(ws_router)
    install_heap_profile(app)  # only with DEBUG_HEAP_PROFILE=1
    app.mount("/ui", StaticFiles(directory=UI_DIR), name="ui")

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(UI_DIR / "index.html")

    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_request_bytes)
    app.add_middleware(RequestIdMiddleware)
    # Outermost, so the count includes answers of the other middleware (413) and unhandled errors.
    app.add_middleware(HttpMetricsMiddleware)
    return app
