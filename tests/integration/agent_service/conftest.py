from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from agent_service.app import create_app
from agent_service.models import AgentEvent, AgentRun, AgentSession
from agent_service.settings import AgentServiceSettings
from shared.db import create_engine, create_sessionmaker
from shared.llm.builtin import BuiltinProvider
from shared.protocol import EventEnvelope
from shared.sse import SSEDecoder, decode_envelope
from tests.support.servers import serve_app

API_KEY = "test-key-current"
OLD_API_KEY = "test-key-previous"
USER = {"user_id": "u-1", "org_id": "o-1", "permissions": ["read"]}


@dataclass
class StreamResult:
    status: int
    headers: httpx.Headers
    events: list[EventEnvelope] = field(default_factory=list)
    comments: int = 0
    retry: int | None = None
    body: Any = None

    @property
    def seqs(self) -> list[int]:
        return [e.seq for e in self.events]

    def of_type(self, type_: str) -> list[EventEnvelope]:
        return [e for e in self.events if e.type.value == type_]

    @property
    def last(self) -> EventEnvelope:
        return self.events[-1]


class AgentClient:
    """A test client speaking to a real Agent Service over loopback."""

    def __init__(self, base_url: str, settings: AgentServiceSettings) -> None:
        self.base_url = base_url
        self.settings = settings
        self.http = httpx.AsyncClient(base_url=base_url, timeout=30.0)

    def headers(self, **extra: str) -> dict[str, str]:
        return {"X-API-Key": API_KEY, **extra}

    async def stream(
        self, method: str, path: str, *, json: Any = None, headers: dict[str, str] | None = None,
        stop_after: int | None = None, stop_on_comment: bool = False, on_event=None,
    ) -> StreamResult:
        """Read SSE events until the server ends the stream, or drop it after ``stop_after`` events."""
        decoder = SSEDecoder()
        async with self.http.stream(method, path, json=json, headers=headers if headers is not None else self.headers()) as resp:
            result = StreamResult(status=resp.status_code, headers=resp.headers)
            if resp.status_code != 200:
                await resp.aread()
                result.body = resp.json()
                return result
            assert resp.headers["content-type"].startswith("text/event-stream")
            async for chunk in resp.aiter_bytes():
                if result.retry is None and chunk.startswith(b"retry:"):
                    result.retry = int(chunk.split(b"\n", 1)[0].split(b":", 1)[1])
                for event in decoder.feed(chunk):
                    result.events.append(decode_envelope(event))
                    if on_event is not None:
                        on_event(result.events[-1])
                result.comments = decoder.comments
                if stop_after is not None and len(result.events) >= stop_after:
                    break
                if stop_on_comment and decoder.comments:
                    break
        return result

    async def execute(self, message: str = "", **kwargs: Any) -> StreamResult:
        body = {"profile_name": "default", "message": message, "user_context": USER}
        body.update(kwargs.pop("body", {}))
        return await self.stream("POST", "/api/v1/agent/execute", json=body, **kwargs)

    async def replay(self, session_id: str, last_event_id: int | None = None, **kwargs: Any) -> StreamResult:
        headers = self.headers()
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        return await self.stream("GET", f"/api/v1/agent/sessions/{session_id}/events", headers=headers, **kwargs)

    async def status(self, session_id: str) -> dict[str, Any]:
        resp = await self.http.get(f"/api/v1/agent/sessions/{session_id}", headers=self.headers())
        assert resp.status_code == 200, resp.text
        return resp.json()

    async def aclose(self) -> None:
        await self.http.aclose()


class Database:
    """Direct reads of the service's tables, for what the API does not show (row counts)."""

    def __init__(self, url: str) -> None:
        self.engine = create_engine(url)
        self.sessionmaker = create_sessionmaker(self.engine)

    async def count(self, model, **where: Any) -> int:
        async with self.sessionmaker() as db:
            stmt = select(func.count()).select_from(model)
            for column, value in where.items():
                stmt = stmt.where(getattr(model, column) == value)
            return int((await db.execute(stmt)).scalar_one())

    async def runs(self, session_id: str) -> int:
        return await self.count(AgentRun, session_id=session_id)

    async def sessions(self) -> int:
        return await self.count(AgentSession)

    async def events(self, session_id: str) -> int:
        return await self.count(AgentEvent, session_id=session_id)

    async def aclose(self) -> None:
        await self.engine.dispose()


def make_settings(database_url: str, **overrides: Any) -> AgentServiceSettings:
    values: dict[str, Any] = {
        "database_url": database_url, "api_keys": [API_KEY, OLD_API_KEY], "migrate_on_start": True,
        "group_commit_ms": 20,
    }
    values.update(overrides)
    return AgentServiceSettings(**values)


@pytest.fixture
def agent_factory(database_url: str):
    """Start Agent Services on loopback: ``async with agent_factory(**settings, provider=...) as client``."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def start(provider=None, tools=None, **overrides: Any) -> AsyncIterator[AgentClient]:
        settings = make_settings(database_url, **overrides)
        provider = provider or BuiltinProvider(first_token_delay=0, chunk_delay=0)
        app = create_app(settings, provider=provider, tools=tools)
        async with serve_app(app) as url:
            client = AgentClient(url, settings)
            client.app = app  # type: ignore[attr-defined]
            try:
                yield client
            finally:
                await client.aclose()

    return start


@pytest.fixture
async def agent(agent_factory) -> AsyncIterator[AgentClient]:
    async with agent_factory() as client:
        yield client


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    database = Database(database_url)
    try:
        yield database
    finally:
        await database.aclose()


def assert_contiguous(events: list[EventEnvelope], start: int = 1) -> None:
    assert [e.seq for e in events] == list(range(start, start + len(events)))


REPO_ROOT = Path(__file__).resolve().parents[3]


