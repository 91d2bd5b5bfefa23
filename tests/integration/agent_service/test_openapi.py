"""The Agent Service's OpenAPI document and its docs page answer, like the chat service's."""

from __future__ import annotations

import httpx

from agent_service.app import create_app
from agent_service.settings import AgentServiceSettings
from shared.sse import SSE_MEDIA_TYPE


async def _get(path: str) -> httpx.Response:
    # /openapi.json and /docs need none of the lifespan's parts: the app is asked in process.
    app = create_app(AgentServiceSettings(api_keys=["k"]))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://agent") as client:
        return await client.get(path)


async def test_openapi_json_answers_with_the_streaming_routes() -> None:
    resp = await _get("/openapi.json")
    assert resp.status_code == 200, resp.text
    paths = resp.json()["paths"]
    execute = paths["/api/v1/agent/execute"]["post"]["responses"]["200"]
    assert SSE_MEDIA_TYPE in execute["content"]
    events = paths["/api/v1/agent/sessions/{session_id}/events"]["get"]["responses"]["200"]
    assert SSE_MEDIA_TYPE in events["content"]


async def test_docs_page_answers_with_its_files_served_here() -> None:
    resp = await _get("/docs")
    assert resp.status_code == 200
    assert "/openapi.json" in resp.text
    assert "http" not in resp.text  # no CDN: every file the page loads is this service's
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "favicon.png"):
        assert f"/docs/assets/{asset}" in resp.text
        assert (await _get(f"/docs/assets/{asset}")).status_code == 200
