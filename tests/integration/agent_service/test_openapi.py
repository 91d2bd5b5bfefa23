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


async def test_the_document_says_what_the_routes_answer() -> None:
    document = (await _get("/openapi.json")).json()
    paths = document["paths"]
    error_body = {"$ref": "#/components/schemas/ErrorBody"}
    assert set(document["components"]["schemas"]["ErrorBody"]["properties"]) == {"error", "detail"}
    # The SSE routes refuse with JSON before their stream starts.
    events = paths["/api/v1/agent/sessions/{session_id}/events"]["get"]["responses"]
    execute = paths["/api/v1/agent/execute"]["post"]["responses"]
    for responses, statuses in ((events, ("401", "404", "422")), (execute, ("400", "401", "404", "409", "413", "422"))):
        for status in statuses:
            assert responses[status]["content"] == {"application/json": {"schema": error_body}}, status
    assert paths["/api/v1/agent/profiles"]["get"]["responses"]["401"]["content"]["application/json"]["schema"] == error_body
    assert list(paths["/metrics"]["get"]["responses"]["200"]["content"]) == ["text/plain"]
    # A message or an answer to a session: a body with neither is not valid by the schema.
    assert len(document["components"]["schemas"]["ExecuteRequest"]["anyOf"]) == 2


async def test_unknown_paths_and_methods_answer_error_bodies() -> None:
    unknown = await _get("/api/v1/agent/nothing-here")
    assert unknown.status_code == 404 and unknown.json() == {"error": "not_found", "detail": "Not Found"}
    app = create_app(AgentServiceSettings(api_keys=["k"]))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://agent") as client:
        wrong = await client.delete("/api/v1/agent/execute")
    assert wrong.status_code == 405 and wrong.json()["error"] == "method_not_allowed"
    assert wrong.headers["allow"] == "POST"
