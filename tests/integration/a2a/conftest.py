"""A real Agent Service on loopback and a small A2A client for it (JSON-RPC and HTTP+JSON)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest

from agent_service.app import create_app
from agent_service.settings import AgentServiceSettings
from shared.llm.base import (
    LLMDone,
    LLMEvent,
    LLMMessage,
    TextDelta,
    ToolSpec,
)
from shared.llm.builtin import BuiltinProvider
from tests.support.models import ScriptedModelBase
from tests.support.servers import serve_app

API_KEY = "a2a-test-key"
VERSION = {"A2A-Version": "1.0"}


class A2AClient:
    """Speaks both bindings of one Agent Service; ``rest`` picks HTTP+JSON, else JSON-RPC."""

    def __init__(self, base_url: str, *, rest: bool = False, key: str | None = API_KEY) -> None:
        self.base_url = base_url
        self.rest = rest
        headers = dict(VERSION) | ({"X-API-Key": key} if key else {})
        self.http = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30.0)
        self._ids = 0

    async def aclose(self) -> None:
        await self.http.aclose()

    async def call(self, method: str, params: dict[str, Any]) -> httpx.Response:
        self._ids += 1
        return await self.http.post("/a2a/jsonrpc", json={"jsonrpc": "2.0", "id": self._ids, "method": method,
                                                          "params": params})

    async def send(self, text: str, **message: Any) -> dict[str, Any]:
        """SendMessage (blocking); the Task, or raises with the error."""
        body = {"message": {"role": "ROLE_USER", "parts": [{"text": text}], "messageId": _id(), **message}}
        if self.rest:
            resp = await self.http.post("/a2a/v1/message:send", json=body)
            assert resp.status_code == 200, resp.text
            return resp.json()["task"]
        resp = await self.call("SendMessage", body)
        assert resp.status_code == 200 and "result" in resp.json(), resp.text
        return resp.json()["result"]["task"]

    async def error(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The JSON-RPC error a call answers."""
        resp = await self.call(method, params)
        body = resp.json()
        assert "error" in body, body
        return body["error"]

    async def get(self, task_id: str, **query: Any) -> dict[str, Any]:
        if self.rest:
            resp = await self.http.get(f"/a2a/v1/tasks/{task_id}", params=query)
            assert resp.status_code == 200, resp.text
            return resp.json()
        resp = await self.call("GetTask", {"id": task_id, **query})
        return resp.json()["result"]

    async def stream(
        self, path_or_method: str, params: dict[str, Any], *, headers: dict[str, str] | None = None,
        stop_after: int | None = None, started: asyncio.Event | None = None,
        until: Callable[[list[tuple[int | None, dict[str, Any]]]], bool] | None = None,
    ) -> list[tuple[int | None, dict[str, Any]]]:
        """An SSE stream's (id, StreamResponse) pairs, until it ends, after ``stop_after`` of them or
        once ``until`` holds of those read; ``started`` is set once the first one is read."""
        if self.rest:
            request = self.http.build_request("POST", f"/a2a/v1{path_or_method}", json=params, headers=headers)
        else:
            self._ids += 1
            request = self.http.build_request(
                "POST", "/a2a/jsonrpc", headers=headers,
                json={"jsonrpc": "2.0", "id": self._ids, "method": path_or_method, "params": params},
            )
        events: list[tuple[int | None, dict[str, Any]]] = []
        response = await self.http.send(request, stream=True)
        try:
            assert response.status_code == 200, (await response.aread()).decode()
            assert response.headers["content-type"].startswith("text/event-stream")
            async for seq, data in _sse(response):
                events.append((seq, data if self.rest else data["result"]))
                if started is not None:
                    started.set()
                if stop_after is not None and len(events) >= stop_after:
                    break
                if until is not None and until(events):
                    break
        finally:
            await response.aclose()
        return events


async def _sse(response: httpx.Response) -> AsyncIterator[tuple[int | None, dict[str, Any]]]:
    seq: int | None = None
    async for line in response.aiter_lines():
        if line.startswith("id:"):
            seq = int(line[3:].strip())
        elif line.startswith("data:"):
            yield seq, orjson.loads(line[5:].strip())
            seq = None


_counter = iter(range(1, 10**9))


def _id() -> str:
    return f"msg-{next(_counter)}"


class GatedModel(ScriptedModelBase):
    """A model that streams ``chunks`` and, after ``hold_after`` of them, waits for ``release``."""

    name = "gated"

    def __init__(self, chunks: Sequence[str], hold_after: int) -> None:
        self.chunks = list(chunks)
        self.hold_after = hold_after
        self.release = asyncio.Event()
        self.holding = asyncio.Event()

    async def reply(self, messages: Sequence[LLMMessage], tools: Sequence[ToolSpec]) -> AsyncIterator[LLMEvent]:
        for index, chunk in enumerate(self.chunks):
            if index == self.hold_after:
                self.holding.set()
                await self.release.wait()
            yield TextDelta(chunk)
        yield LLMDone(prompt_tokens=1, completion_tokens=len(self.chunks), finish_reason="stop")


def settings_for(database_url: str, **overrides: Any) -> AgentServiceSettings:
    values: dict[str, Any] = {
        "database_url": database_url, "api_keys": [API_KEY], "migrate_on_start": True, "group_commit_ms": 20,
        "memory_enabled": False, "replay_poll_seconds": 0.1,
    }
    return AgentServiceSettings(**(values | overrides))


@pytest.fixture
def a2a_factory(database_url: str):
    """``async with a2a_factory(provider=..., **settings) as base_url``: an Agent Service on loopback."""

    @asynccontextmanager
    async def start(provider=None, **overrides: Any) -> AsyncIterator[str]:
        provider = provider or BuiltinProvider(first_token_delay=0, chunk_delay=0)
        async with serve_app(create_app(settings_for(database_url, **overrides), provider=provider)) as url:
            yield url

    return start


@pytest.fixture
async def a2a_url(a2a_factory) -> AsyncIterator[str]:
    async with a2a_factory() as url:
        yield url


@pytest.fixture(params=["jsonrpc", "http_json"])
async def client(request, a2a_url: str) -> AsyncIterator[A2AClient]:
    c = A2AClient(a2a_url, rest=request.param == "http_json")
    try:
        yield c
    finally:
        await c.aclose()
