"""``GET /health`` and ``GET /metrics``."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from conversation_service.deps import StateDep

router = APIRouter(tags=["operations"])


@router.get("/health")
async def health(state: StateDep, response: Response) -> dict:
    checks: dict[str, str] = {}
    try:
        async with state.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception:
        checks["database"] = "unavailable"
    checks["hub"] = type(state.hub).__name__
    # The chat works without the agent (direct LLM fallback): its absence degrades, never fails, us.
    agent = await state.agent_health.check()
    ok = checks["database"] == "ok"
    response.status_code = 200 if ok else 503
    status = "ok" if ok and agent["status"] == "ok" and agent["breaker"] == "closed" else "degraded"
    return {"status": status if ok else "unavailable", "checks": checks, "agent_service": agent}


@router.get("/metrics", include_in_schema=False)
async def metrics(state: StateDep) -> Response:
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
