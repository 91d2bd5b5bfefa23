"""The ConversationService application: ``create_app(settings)``; its started parts are in ``lifespan``."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from conversation_service.auth.router import router as auth_router
from conversation_service.conversations.router import router as conversations_router
from conversation_service.dead_letters.router import router as dead_letters_router
from conversation_service.errors import install_error_handlers
from conversation_service.health import router as health_router
from conversation_service.interactions.router import router as agent_router
from conversation_service.lifespan import lifespan
from conversation_service.memory.router import router as memory_router
from conversation_service.messages.router import router as messages_router
from conversation_service.reply_control.router import router as reply_control_router
from conversation_service.settings import ConversationSettings
from conversation_service.websocket.router import router as ws_router
from shared.api_docs import install_api_docs
from shared.body_limit import BodySizeLimitMiddleware
from shared.heap_profile import install_heap_profile
from shared.http_contract import install_openapi
from shared.http_metrics import HttpMetricsMiddleware
from shared.logging import RequestIdMiddleware
from shared.serving import Shutdown
from shared.tracing import NO_TRACING
from shared.tracing.asgi import TracingMiddleware
from shared.tracing.config import TracingConfig

UI_DIR = Path(__file__).resolve().parent / "ui"


def create_app(settings: ConversationSettings | None = None) -> FastAPI:
    settings = settings or ConversationSettings()
    app = FastAPI(
        title="ConversationService",
        version="1.0.0",
        description="Chat API: conversations, messages, and a live WebSocket stream per conversation.",
        lifespan=lifespan(settings),
        docs_url=None,
        redoc_url=None,
    )
    install_api_docs(app)  # /docs with its files served from here: it works offline
    install_openapi(app)  # the document defines the ErrorBody every error answer is
    app.state.settings = settings
    # Begun by the server on SIGTERM (``shared.serving``); the lifespan's exit drains within it.
    app.state.shutdown = Shutdown(settings.shutdown_grace_s)
    app.state.tracing = NO_TRACING  # until the lifespan has built this process's tracer provider
    install_error_handlers(app)
    app.include_router(health_router)
    app.include_router(auth_router)
    app.include_router(conversations_router)
    app.include_router(messages_router)
    app.include_router(reply_control_router)
    app.include_router(agent_router)
    app.include_router(memory_router)
    app.include_router(ws_router)
    app.include_router(dead_letters_router)
    install_heap_profile(app)  # only with DEBUG_HEAP_PROFILE=1
    app.mount("/ui", StaticFiles(directory=UI_DIR), name="ui")

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(UI_DIR / "index.html")

    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_request_bytes)
    app.add_middleware(RequestIdMiddleware)
    # Outermost, so the count includes answers of the other middleware (413) and unhandled errors.
    app.add_middleware(HttpMetricsMiddleware)
    if TracingConfig.from_env().enabled:  # off: no middleware at all
        app.add_middleware(TracingMiddleware)
    return app
