"""The Agent Service application: ``create_app(settings)``.

Everything with a lifetime (database engine, LLM provider, tool registry, event log writer, run
manager) is created in the lifespan, reachable through ``app.state`` and closed on shutdown. The
provider and tools may be handed in (another configured provider, a different tool set); by
default they are built from the environment.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agent_service import health
from agent_service.errors import install_error_handlers
from agent_service.metrics import AgentMetrics
from agent_service.migrate import run_migrations
from agent_service.profiles import router as profiles_router
from agent_service.profiles.service import ProfileStore
from agent_service.runs import router as runs_router
from agent_service.runs.engine import ReActEngine, ToolLookup, find_tool
from agent_service.runs.event_log import EventLog
from agent_service.runs.leases import LeaseKeeper, new_owner_id
from agent_service.runs.service import RunManager, RunService
from agent_service.runs.streaming import EventStreamer, StreamSettings
from agent_service.sessions import router as sessions_router
from agent_service.sessions.service import SessionService
from agent_service.settings import AgentServiceSettings
from agent_service.tools.knowledge.indexer import index_knowledge
from agent_service.tools.registry import build_registry
from shared.db import create_engine, create_sessionmaker
from shared.heap_profile import install_heap_profile
from shared.http_metrics import HttpMetricsMiddleware, install_http_metrics
from shared.llm.base import LLMProvider
from shared.logging import RequestIdMiddleware
from shared.protocol import ErrorBody
from shared.fastpath.process import tune_process

log = logging.getLogger(__name__)


class BodySizeLimitMiddleware:
    """Refuses request bodies over ``max_bytes`` with 413 before they are read into memory."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await self._reject(send)
                return
        received = 0
        too_large = False

        async def limited_receive() -> Message:
            nonlocal received, too_large
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    too_large = True
                    raise _BodyTooLarge
            return message

        try:
            await self.app(scope, limited_receive, send)
        except _BodyTooLarge:
            await self._reject(send)

    async def _reject(self, send: Send) -> None:
        body = ErrorBody(error="body_too_large", detail=f"request body exceeds {self.max_bytes} bytes")
        payload = body.model_dump_json().encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
        await send({"type": "http.response.body", "body": payload})


class _BodyTooLarge(Exception):
    pass


async def _build_tools(sessionmaker: Any, settings: AgentServiceSettings) -> ToolLookup:
    """The built-in tools, with the knowledge folder (re)indexed into the database first."""
    await index_knowledge(sessionmaker, settings.knowledge_dir)
    return build_registry(sessionmaker, settings.knowledge_dir)


def _build_provider() -> LLMProvider:
    from shared.llm.config import LLMSettings, build_provider

    return build_provider(LLMSettings())


def create_app(
    settings: AgentServiceSettings | None = None,
    *,
    provider: LLMProvider | None = None,
    tools: ToolLookup | None = None,
    own_process: bool = False,
) -> FastAPI:
    """The Agent Service app. ``own_process``: the app is the process's service (``python -m
    agent_service``), so it may tune the interpreter once started (``shared.fastpath.process``); an app
    embedded in another process (tests, a host application) leaves it alone."""
    settings = settings or AgentServiceSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        metrics = AgentMetrics()
        install_http_metrics(app, metrics.registry)
        db_engine = create_engine(settings.database_url)
        llm = provider
        event_log: EventLog | None = None
        manager: RunManager | None = None
        keeper: LeaseKeeper | None = None
        try:
            if settings.should_migrate_on_start:
                await run_migrations(db_engine)
            sessionmaker = create_sessionmaker(db_engine)
            profiles = ProfileStore.from_file(settings.profiles_file)
            tool_lookup = tools if tools is not None else await _build_tools(sessionmaker, settings)
            profiles.check_tools(lambda name: find_tool(tool_lookup, name) is not None)
            if llm is None:
                llm = _build_provider()
            event_log = EventLog(
                sessionmaker, group_commit_ms=settings.group_commit_ms, live_queue_size=settings.live_queue_size,
                metrics=metrics,
            )
            event_log.start()
            engine = ReActEngine(
                llm, tool_lookup, metrics, ask_user_timeout_s=settings.ask_user_timeout_seconds,
                tool_timeout_s=settings.tool_timeout_seconds, max_tool_result_chars=settings.max_tool_result_chars,
            )
            manager = RunManager(
                sessionmaker=sessionmaker, event_log=event_log, engine=engine, metrics=metrics,
                owner_id=new_owner_id(), lease_seconds=settings.lease_seconds,
            )
            event_log.lease_to(manager.owner_id, manager.taken_over_runs)
            keeper = LeaseKeeper(
                sessionmaker=sessionmaker, manager=manager, event_log=event_log, metrics=metrics,
                renew_seconds=settings.lease_renew_seconds,
            )
            # Only runs whose lease expired: other replicas' live runs are left alone. Runs of a
            # process that died moments ago are failed by a later pass, once their lease runs out.
            recovered = await keeper.recover()
            if recovered:
                log.warning("ended runs interrupted by a previous stop", extra={"count": recovered})
            keeper.start()
            if not settings.api_keys:
                log.warning("AGENT_SERVICE_API_KEYS is empty: every authenticated request is refused")

            app.state.settings = settings
            app.state.metrics = metrics
            app.state.db_engine = db_engine
            app.state.sessionmaker = sessionmaker
            app.state.profiles = profiles
            app.state.tools = tool_lookup
            app.state.provider = llm
            app.state.event_log = event_log
            app.state.run_manager = manager
            app.state.lease_keeper = keeper
            app.state.run_service = RunService(
                settings=settings, sessionmaker=sessionmaker, profiles=profiles, manager=manager, event_log=event_log
            )
            app.state.session_service = SessionService(
                sessionmaker=sessionmaker, manager=manager, event_log=event_log,
                # The owner acts on a cancel at its next renewal; wait that long plus time to end
                # the run (at least a second, so a busy database does not turn it into a 202).
                remote_cancel_wait_seconds=settings.lease_renew_seconds + max(settings.lease_renew_seconds, 1.0),
                poll_seconds=settings.replay_poll_seconds,
            )
            app.state.streamer = EventStreamer(
                event_log, sessionmaker,
                StreamSettings(
                    heartbeat_seconds=settings.heartbeat_seconds, retry_ms=settings.sse_retry_ms,
                    poll_seconds=settings.replay_poll_seconds,
                ),
                metrics,
            )
            if own_process:
                tune_process()
            yield
        finally:
            if manager is not None:
                # The keeper still renews while the runs end, so no replica takes them meanwhile.
                await manager.shutdown()
            if keeper is not None:
                await keeper.aclose()
            if event_log is not None:
                await event_log.aclose()
            if llm is not None and provider is None:
                await llm.aclose()
            await db_engine.dispose()

    app = FastAPI(title="TaskForce Agent Service", version="1.0", lifespan=lifespan)
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(runs_router.router)
    app.include_router(sessions_router.router)
    app.include_router(profiles_router.router)
    install_heap_profile(app)  # only with DEBUG_HEAP_PROFILE=1
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(RequestIdMiddleware)
    # Outermost, so the count includes answers of the other middleware (413) and unhandled errors.
    app.add_middleware(HttpMetricsMiddleware)
    return app
