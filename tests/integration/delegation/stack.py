"""Both services, real, on loopback: the Agent Service and a ConversationService that delegates to it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from agent_service.app import create_app as create_agent_app
from agent_service.settings import AgentServiceSettings
from conversation_service.settings.delegation import DelegationSettings
from shared.llm.builtin import BuiltinProvider
from tests.integration.conversation_service.support import auth, make_settings, running
from tests.support.servers import serve_app

AGENT_KEY = "agent-key-for-tests-0123456789"
# Fast backoff so failure paths finish in milliseconds; the schedule itself is tested in the SDK.
FAST = {"agent_retry_delays_s": "0.01,0.02,0.04", "agent_reconnect_delays_s": "0.01,0.02,0.04"}


@dataclass
class Stack:
    chat_url: str
    chat_app: Any
    agent_url: str | None
    http: httpx.AsyncClient

    @property
    def state(self):
        return self.chat_app.state

    async def conversation(self, user: str = "alice") -> str:
        r = await self.http.post(f"{self.chat_url}/conversations", json={"title": "t"}, headers=auth(user))
        assert r.status_code == 201, r.text
        return r.json()["id"]

    async def send(self, conversation_id: str, content: str, user: str = "alice", **extra: Any) -> httpx.Response:
        return await self.http.post(
            f"{self.chat_url}/conversations/{conversation_id}/messages",
            json={"content": content, **extra}, headers=auth(user),
        )

    async def answer(self, conversation_id: str, question_id: str, answer: str, user: str = "alice",
                     **extra: Any) -> httpx.Response:
        return await self.http.post(
            f"{self.chat_url}/conversations/{conversation_id}/agent-answer",
            json={"question_id": question_id, "answer": answer, **extra}, headers=auth(user),
        )


@asynccontextmanager
async def agent_service(
    database_url: str, tmp_path, *, tools: Any = None, provider: Any = None, **overrides: Any,
) -> AsyncIterator[str]:
    settings = AgentServiceSettings(
        database_url=database_url, api_keys=[AGENT_KEY], migrate_on_start=True,
        knowledge_dir=tmp_path / "no-docs", **overrides,
    )
    provider = provider or BuiltinProvider(first_token_delay=0, chunk_delay=0)
    app = create_agent_app(settings, provider=provider, tools=tools)
    async with serve_app(app) as url:
        yield url


@asynccontextmanager
async def chat_service(database_url: str, agent_url: str, *, delegation: dict | None = None,
                       **overrides: Any) -> AsyncIterator[Stack]:
    settings = make_settings(database_url, agent_service_url=agent_url, agent_service_api_key=AGENT_KEY,
                             delegation=DelegationSettings(**{**FAST, **(delegation or {})}), **overrides)
    async with running(settings) as (url, app), httpx.AsyncClient(timeout=30) as http:
        yield Stack(chat_url=url, chat_app=app, agent_url=agent_url, http=http)


def frames_of(frames: list[dict], type_: str) -> list[dict]:
    return [f for f in frames if f["type"] == type_]


def final_of(frames: list[dict], message_id: str | None = None) -> dict:
    done = [f for f in frames if f["type"] == "message.completed"
            and (message_id is None or f["data"]["message_id"] == message_id)]
    assert done, [f["type"] for f in frames]
    return done[-1]


def deltas_text(frames: list[dict], message_id: str) -> str:
    return "".join(f["data"]["text"] for f in frames if f["type"] == "message.delta"
                   and f["data"]["message_id"] == message_id)


async def recv_until(ws, predicate, timeout: float = 20.0) -> list[dict]:
    frames: list[dict] = []
    async with asyncio.timeout(timeout):
        while True:
            frame = json.loads(await ws.recv())
            frames.append(frame)
            if predicate(frame):
                return frames
