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

from conversation_service.conversations.router import router as conversations_router
from conversation_service.db import migrate
from conversation_service.db.repository import unit_of_work
from conversation_service.direct_llm.replier import DirectLLMReplier
from conversation_service.errors import install_error_handlers
from conversation_service.health import router as health_router
from conversation_service.limits import BodySizeLimitMiddleware
from conversation_service.messages.dispatch import DirectReplyDispatcher, ReplyDispatcher
from conversation_service.messages.router import router as messages_router
from conversation_service.metrics import ConversationMetrics
from conversation_service.realtime.hub import Hub, InProcessHub, RedisHub
from conversation_service.realtime.publisher import FramePublisher
from conversation_service.realtime.repository import FrameRepository
from conversation_service.realtime.router import router as ws_router
from conversation_service.realtime.seq import InProcessSeqAllocator, RedisSeqAllocator, SeqAllocator
from conversation_service.realtime.writer import FrameWriter
from conversation_service.settings import ConversationSettings
from conversation_service.state import ServiceState
from conversation_service.tasks import TaskSupervisor
from shared.db import create_engine, create_sessionmaker
from shared.llm.base import LLMProvider
from shared.logging import RequestIdMiddleware

log = logging.getLogger(__name__)

UI_DIR = Path(__file__).resolve().parent / "ui"

# Builds the dispatcher from the started resources; the default answers everything directly.
DispatcherFactory = Callable[[ServiceState], ReplyDispatcher]


def _default_dispatcher(state: ServiceState) -> ReplyDispatcher:
    return DirectReplyDispatcher(state.replier, state.tasks)


def _build_llm(http_client: httpx.AsyncClient) -> LLMProvider:
    from shared.llm.config import LLMSettings, build_provider

    return build_provider(LLMSettings(), http_client)


def create_app(
    settings: ConversationSettings | None = None,
    *,
    dispatcher_factory: DispatcherFactory = _default_dispatcher,
) -> FastAPI:
    settings = settings or ConversationSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        settings.warn_about_defaults()
        metrics = ConversationMetrics()
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
            metrics=metrics,
        )

        async def seq_floor(conversation_id: str) -> int:
            async with unit_of_work(sessionmaker) as session:
                persisted = await FrameRepository(session).max_seq(conversation_id)
            return max(persisted, writer.pending_max(conversation_id))

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
        publisher = FramePublisher(seq, writer, hub, metrics)
        tasks = TaskSupervisor()
        replier = DirectLLMReplier(
            sessionmaker, llm, publisher, metrics,
            history_messages=settings.direct_history_messages, system_prompt=settings.direct_system_prompt,
        )
        state = ServiceState(
            settings=settings, engine=engine, sessionmaker=sessionmaker, http_client=http_client, llm=llm,
            hub=hub, publisher=publisher, tasks=tasks, replier=replier, dispatcher=None,  # type: ignore[arg-type]
            metrics=metrics,
        )
        state.dispatcher = dispatcher_factory(state)
        app.state.services = state
        try:
            yield
        finally:
            await tasks.close()
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
    app.include_router(ws_router)
    app.mount("/ui", StaticFiles(directory=UI_DIR), name="ui")

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(UI_DIR / "index.html")

    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_request_bytes)
    app.add_middleware(RequestIdMiddleware)
    return app
