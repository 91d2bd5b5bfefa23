"""Liveness, readiness (the database answers) and Prometheus metrics; no API key needed."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import PlainTextResponse
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from agent_service.deps import DatabaseDep, MetricsDep
from agent_service.errors import NotReady
from agent_service.memory.deps import MemoryDep
from shared.app_state import started
from shared.http_contract import METRICS_RESPONSE, errors
from shared.metrics_export import render_metrics

router = APIRouter(tags=["health"])
MCPDep = Annotated[Any, Depends(started("agent", "mcp"))]


@router.get("/health")
async def health(memory: MemoryDep) -> dict[str, str]:
    """Alive; ``memory`` says how long-term memory is doing (NORMAL, DEGRADED, DOWN, or OFF)."""
    return {"status": "ok", "memory": memory.health.state().name if memory is not None else "OFF"}


@router.get("/ready", responses=errors({503: "the database does not answer"}))
async def ready(db_engine: DatabaseDep, mcp: MCPDep) -> dict[str, Any]:
    """Ready when the database answers. ``mcp_servers`` (when MCP servers are configured) says how
    each is doing (``ready``, ``starting``, ``restarting``; its breaker, tools, last error): a
    server that is down makes its tools fail, not the service unready."""
    try:
        async with db_engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
    except (SQLAlchemyError, OSError) as exc:
        raise NotReady(f"database unavailable: {type(exc).__name__}") from None
    report: dict[str, Any] = {"status": "ready", "database": "ok"}
    if mcp is not None:
        report["mcp_servers"] = mcp.health()
    return report


@router.get("/metrics", response_class=PlainTextResponse, responses=METRICS_RESPONSE)
async def metrics(agent_metrics: MetricsDep, request: Request) -> Response:
    """Prometheus text, or OpenMetrics (with exemplars) when asked for in ``Accept``."""
    body, media_type = render_metrics(agent_metrics.registry, request.headers.get("accept"))
    return Response(body, media_type=media_type)
