"""The chat API's own HTTP errors: a 405 names every method of its path; an unreadable body is
the documented 400."""

from __future__ import annotations

import httpx

from conversation_service.app import create_app
from conversation_service.settings import ConversationSettings


def _client() -> httpx.AsyncClient:
    # Routing and body errors are answered before any of the lifespan's parts is needed.
    app = create_app(ConversationSettings())
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://chat")


async def test_405_names_every_method_of_the_path() -> None:
    # FastAPI keeps GET and POST of one path in two routes; Allow named only the first one's.
    async with _client() as client:
        for path, allow in (
            ("/conversations", "GET, POST"),
            ("/conversations/c-1/messages", "GET, POST"),
            ("/conversations/c-1/agent-answer", "POST"),
        ):
            resp = await client.request("OPTIONS", path)
            assert resp.status_code == 405, path
            assert resp.headers["allow"] == allow, path
            assert resp.json()["error"] == "method_not_allowed"


async def test_a_body_that_is_not_utf8_is_the_documented_400() -> None:
    async with _client() as client:
        document = (await client.get("/openapi.json")).json()
        for path in ("/conversations", "/conversations/{conversation_id}/messages"):
            assert "400" in document["paths"][path]["post"]["responses"], path
        resp = await client.post("/conversations", content=b'{"title": "\xff\xfe"}',
                                 headers={"content-type": "application/json"})
    assert resp.status_code == 400
    assert resp.json()["error"] == "bad_request"
