"""``GET /health`` (liveness), ``GET /ready`` (readiness: the database answers) and ``GET /metrics``.

Liveness answers 200 whenever the process serves, saying in its body how the database and the Agent
Service are: a replica is not restarted because PostgreSQL is away (its writes wait and retry, and a
restart would only lose what it holds). Readiness answers 503 while the database does not answer, so a
load balancer or Kubernetes sends new requests to the replicas that can serve them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from conversation_service.deps import MetricsDep, RealtimeDep, StorageDep
from conversation_service.errors import Unavailable
from conversation_service.lifespan import AgentParts
from shared.app_state import started
from shared.http_contract import errors
from shared.metrics_export import render_metrics

router = APIRouter(tags=["operations"])
AgentDep = Annotated[AgentParts, Depends(started("agent"))]


@router.get("/health")
async def health(storage: StorageDep, realtime: RealtimeDep, agent: AgentDep) -> dict:
    checks: dict[str, str] = {}
    try:
        async with storage.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception:  # noqa: BLE001 - whatever the failure, the database is unavailable to us
        checks["database"] = "unavailable"
    checks["hub"] = type(realtime.hub).__name__
    # The chat works without the agent (direct LLM fallback): its absence degrades, never fails, us.
    agent_health = await agent.health.check()
    ok = checks["database"] == "ok"
    status = "ok" if ok and agent_health["status"] == "ok" and agent_health["breaker"] == "closed" else "degraded"
    return {"status": status if ok else "unavailable", "checks": checks, "agent_service": agent_health}


@router.get("/ready", responses=errors({503: "the database does not answer"}))
async def ready(storage: StorageDep) -> dict[str, str]:
    try:
        async with storage.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
    except (SQLAlchemyError, OSError) as exc:
        raise Unavailable(f"database unavailable: {type(exc).__name__}") from None
    return {"status": "ready", "database": "ok"}


@router.get("/metrics", include_in_schema=False)
async def metrics(metrics: MetricsDep, request: Request) -> Response:
    """Prometheus text, or OpenMetrics (with exemplars) when asked for in ``Accept``."""
    body, media_type = render_metrics(metrics.registry, request.headers.get("accept"))
    return Response(body, media_type=media_type)
