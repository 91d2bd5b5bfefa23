"""The ConversationService's tenancy matrix: every route of its OpenAPI document and its WebSocket, against
every kind of caller, on SQLite and PostgreSQL, with a real OpenID Provider whose sign-in client id is the
API's audience (a single-app registration, where an ID token names the API as its audience). A route that
is not in the matrix fails it.

The owner is alice@acme (her access token). The callers: ``alice`` herself; ``carol``, another user of acme;
``bob``, a user of globex; ``id_token``, alice's own ID token; ``agent_key``, a service's credential (the
Agent Service's key: the chat's API has users only, no service callers, so a service credential of any
organisation is no credential here); ``none``. What each gets is OK, HIDDEN (404), CONFLICT (409: the
owner asked for something the resource's state refuses), REFUSED (a WebSocket that does not open) or
UNAUTH (401). No answer to anyone but alice holds anything of hers (``SECRET``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from agent_service.app import create_app as create_agent_app
from agent_service.settings import AgentServiceSettings
from conversation_service.app import create_app
from conversation_service.settings import ConversationSettings
from conversation_service.settings.delegation import DelegationSettings
from shared.llm.builtin import BuiltinProvider
from tests.integration.access.support import SECRET, USERS, alices_memory, require_backend
from tests.integration.conversation_service.auth.support import oidc_settings
from tests.integration.conversation_service.support import make_settings, ws_url
from tests.support.databases import backends, fresh_database
from tests.support.oidc_provider import CHAT_AUDIENCE, CHAT_CLIENT, ProviderConfig, running_provider
from tests.support.servers import serve_app

AGENT_KEY = "chat-tenancy-agent-key-0123456789"


class Outcome(Enum):
    OK = "ok"
    HIDDEN = "hidden"
    CONFLICT = "conflict"
    REFUSED = "refused"
    UNAUTH = "unauthenticated"


OK, HIDDEN, CONFLICT, REFUSED, UNAUTH = Outcome.OK, Outcome.HIDDEN, Outcome.CONFLICT, Outcome.REFUSED, Outcome.UNAUTH
SUBJECTS = ("alice", "carol", "bob", "id_token", "agent_key", "none")
NO_ONE = {"id_token": UNAUTH, "agent_key": UNAUTH, "none": UNAUTH}
RESOURCE = {"alice": OK, "carol": HIDDEN, "bob": HIDDEN} | NO_ONE
# One's own (a new conversation, one's own memory): everyone signed in; nothing of alice's for others.
OWN = {"alice": OK, "carol": OK, "bob": OK} | NO_ONE
SOCKET = {"alice": OK} | {s: REFUSED for s in SUBJECTS if s != "alice"}


@dataclass
class World:
    http: httpx.AsyncClient
    chat: str
    agent_app: Any
    headers: dict[str, dict[str, str]]
    conversation_id: str = ""
    message_id: str = ""

    async def conversation(self, content: str | None = None) -> str:
        created = await self.http.post("/conversations", json={"title": f"alice's {SECRET}"}, headers=self.headers["alice"])
        assert created.status_code == 201, created.text
        conversation_id = created.json()["id"]
        if content is not None:
            await self.say(conversation_id, content)
        return conversation_id

    async def say(self, conversation_id: str, content: str) -> None:
        """Send alice's message and wait for its reply to end (or its question to be asked)."""
        async with websockets.connect(ws_url(self.chat, conversation_id), additional_headers=self.headers["alice"]) as ws:
            sent = await self.http.post(f"/conversations/{conversation_id}/messages", json={"content": content},
                                        headers=self.headers["alice"])
            assert sent.status_code == 202, sent.text
            async with asyncio.timeout(30):
                while json.loads(await ws.recv())["type"] not in (
                        "message.completed", "message.error", "agent.ask_user"):
                    pass

    async def messages(self, conversation_id: str) -> list[dict]:
        listed = await self.http.get(f"/conversations/{conversation_id}/messages", headers=self.headers["alice"])
        return listed.json()["items"]

    async def reply_of(self, conversation_id: str) -> str:
        return next(m["id"] for m in reversed(await self.messages(conversation_id)) if m["role"] == "assistant")

    async def asking(self) -> tuple[str, str]:
        """A conversation of alice's whose agent waits for her answer, and the question's id."""
        conversation_id = await self.conversation("/agent plan a trip")
        questions = await self.http.get(f"/conversations/{conversation_id}/agent-questions", headers=self.headers["alice"])
        return conversation_id, questions.json()["items"][-1]["question_id"]

    async def memory(self) -> int:
        return await alices_memory(self.agent_app)


@pytest.fixture(scope="module", params=backends())
async def world(request, tmp_path_factory) -> AsyncIterator[World]:
    require_backend(request.param)
    tmp: Path = tmp_path_factory.mktemp(f"chat-tenancy-{request.param}")
    async with (
        running_provider(tmp, ProviderConfig(users=USERS)) as provider,
        fresh_database(request.param, tmp, "agent") as agent_db,
        fresh_database(request.param, tmp, "chat") as chat_db,
    ):
        agent_app = create_agent_app(
            AgentServiceSettings(database_url=agent_db, api_keys=[AGENT_KEY], migrate_on_start=True,
                                 knowledge_dir=tmp / "no-docs"),
            provider=BuiltinProvider(first_token_delay=0, chunk_delay=0),
        )
        async with serve_app(agent_app) as agent_url:
            settings: ConversationSettings = make_settings(
                chat_db, oidc=oidc_settings(provider), agent_service_url=agent_url, agent_service_api_key=AGENT_KEY,
                delegation=DelegationSettings(agent_retry_delays_s="0.01", agent_reconnect_delays_s="0.01"),
            )
            assert settings.oidc.audience == CHAT_CLIENT.client_id == CHAT_AUDIENCE
            tokens = {user: await provider.user_tokens(user, CHAT_CLIENT) for user in USERS}
            headers = {user: {"Authorization": f"Bearer {tokens[user]['access_token']}"} for user in ("alice", "carol", "bob")}
            headers |= {"id_token": {"Authorization": f"Bearer {tokens['alice']['id_token']}"},
                        "agent_key": {"X-API-Key": AGENT_KEY, "Authorization": f"Bearer {AGENT_KEY}"}, "none": {}}
            async with serve_app(create_app(settings)) as chat, httpx.AsyncClient(base_url=chat, timeout=30) as http:
                world = World(http=http, chat=chat, agent_app=agent_app, headers=headers)
                world.conversation_id = await world.conversation(f"/agent my name is Alice {SECRET}")
                world.message_id = await world.reply_of(world.conversation_id)
                yield world


# -- the cases ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    route: str
    expect: dict[str, Outcome]
    call: Callable[[World, str, Any], Awaitable[httpx.Response | Outcome]]
    target: Callable[[World], Awaitable[Any]] | None = None
    intact: Callable[[World, Any], Awaitable[None]] | None = None
    # A list of one's own: OK when it holds the owner's conversation, HIDDEN when it does not.
    lists: bool = False


def _http(method: str, path: str, body: dict | None = None):
    async def call(world: World, subject: str, target: Any) -> httpx.Response:
        conversation_id, extra = (target if isinstance(target, tuple) else (target, None)) if target else (None, None)
        url = path.format(conversation=conversation_id or world.conversation_id, message=world.message_id,
                          memory=target, question=extra)
        json_body = {k: (v.format(question=extra) if isinstance(v, str) else v) for k, v in body.items()} if body else None
        return await world.http.request(method, url, json=json_body, headers=world.headers[subject])

    return call


async def _socket(world: World, subject: str, _target: Any) -> Outcome:
    """The conversation's WebSocket: OK when it opens and answers a ping, REFUSED otherwise."""
    try:
        async with websockets.connect(ws_url(world.chat, world.conversation_id),
                                      additional_headers=world.headers[subject]) as ws:
            await ws.send('{"type": "ping"}')
            async with asyncio.timeout(10):
                while (frame := json.loads(await ws.recv()))["type"] != "pong":
                    assert SECRET not in json.dumps(frame) or subject == "alice"
            return OK
    except (websockets.InvalidStatus, websockets.ConnectionClosed):
        return REFUSED


async def _fresh(world: World) -> str:
    return await world.conversation()


async def _replied(world: World) -> tuple[str, str]:
    conversation_id = await world.conversation("hello")
    return conversation_id, await world.reply_of(conversation_id)


async def _title_kept(world: World, conversation_id: str) -> None:
    got = await world.http.get(f"/conversations/{conversation_id}", headers=world.headers["alice"])
    assert got.status_code == 200 and got.json()["title"] == f"alice's {SECRET}", got.text


async def _question_open(world: World, target: tuple[str, str]) -> None:
    questions = await world.http.get(f"/conversations/{target[0]}/agent-questions", headers=world.headers["alice"])
    assert questions.json()["items"][-1]["status"] == "PENDING", questions.text


async def _memory_kept(world: World, memory_id: int) -> None:
    listed = await world.http.get("/memory", headers=world.headers["alice"])
    assert memory_id in [m["id"] for m in listed.json()["items"]], listed.text


async def _still_empty(world: World, conversation_id: str) -> None:
    assert await world.messages(conversation_id) == []


CASES = [
    Case("POST /conversations", OWN, _http("POST", "/conversations", {"title": "mine"})),
    Case("GET /conversations", OWN, _http("GET", "/conversations"), lists=True),
    Case("GET /conversations/{conversation_id}", RESOURCE, _http("GET", "/conversations/{conversation}")),
    Case("PATCH /conversations/{conversation_id}", RESOURCE,
         _http("PATCH", "/conversations/{conversation}", {"title": f"alice's {SECRET}"}), target=_fresh,
         intact=_title_kept),
    Case("DELETE /conversations/{conversation_id}", RESOURCE, _http("DELETE", "/conversations/{conversation}"),
         target=_fresh, intact=_title_kept),
    Case("GET /conversations/{conversation_id}/messages", RESOURCE, _http("GET", "/conversations/{conversation}/messages")),
    Case("POST /conversations/{conversation_id}/messages", RESOURCE,
         _http("POST", "/conversations/{conversation}/messages", {"content": "hello"}), target=_fresh,
         intact=_still_empty),
    Case("POST /conversations/{conversation_id}/messages/{message_id}/stop", RESOURCE | {"alice": CONFLICT},
         _http("POST", "/conversations/{conversation}/messages/{message}/stop")),
    Case("POST /conversations/{conversation_id}/messages/{message_id}/regenerate", RESOURCE,
         _http("POST", "/conversations/{conversation}/messages/{question}/regenerate"), target=_replied),
    Case("POST /conversations/{conversation_id}/agent-answer", RESOURCE,
         _http("POST", "/conversations/{conversation}/agent-answer", {"question_id": "{question}", "answer": "Lisbon"}),
         target=World.asking, intact=_question_open),
    Case("GET /conversations/{conversation_id}/agent-session", RESOURCE,
         _http("GET", "/conversations/{conversation}/agent-session")),
    Case("GET /conversations/{conversation_id}/agent-questions", RESOURCE,
         _http("GET", "/conversations/{conversation}/agent-questions")),
    Case("GET /memory", OWN, _http("GET", "/memory"), target=World.memory),
    Case("DELETE /memory", OWN, _http("DELETE", "/memory"), target=World.memory, intact=_memory_kept),
    Case("DELETE /memory/{memory_id}", RESOURCE, _http("DELETE", "/memory/{memory}"), target=World.memory,
         intact=_memory_kept),
    Case("WS /conversations/{conversation_id}/ws", SOCKET, _socket),
]
# Open on purpose: the probes, and the page's sign-in, whose cookie, state and CSRF checks the web
# sign-in tests hold (tests/integration/conversation_service/auth/test_web_login.py).
PUBLIC = {"GET /health", "GET /ready", "GET /auth/session", "POST /auth/logout"}


def _outcome(response: httpx.Response | Outcome, case: Case, world: World) -> Outcome | str:
    if isinstance(response, Outcome):
        return response
    status = response.status_code
    known = {401: UNAUTH, 404: HIDDEN, 409: CONFLICT}
    if status in known:
        return known[status]
    if not 200 <= status < 300:
        return f"status {status}"
    if case.lists:
        return OK if world.conversation_id in {c["id"] for c in response.json()["items"]} else HIDDEN
    return OK


@pytest.mark.parametrize("case", CASES, ids=[case.route for case in CASES])
async def test_every_door_checks_its_caller(world: World, case: Case) -> None:
    wrong = []
    for subject in SUBJECTS:
        target = await case.target(world) if case.target is not None else None
        response = await case.call(world, subject, target)
        got, expected = _outcome(response, case, world), case.expect[subject]
        if case.lists and subject != "alice" and got is HIDDEN:
            got = OK  # one's own list, without alice's conversation in it: as it should be
        if got is not expected:
            text = response.text[:300] if isinstance(response, httpx.Response) else ""
            wrong.append(f"{subject}: expected {expected.value}, got {getattr(got, 'value', got)} {text}")
            continue
        if subject != "alice" and isinstance(response, httpx.Response) and SECRET in response.text:
            wrong.append(f"{subject}: the answer holds alice's {SECRET}: {response.text[:300]}")
        if subject != "alice" and case.intact is not None:
            await case.intact(world, target)
    assert wrong == [], f"{case.route}:\n" + "\n".join(wrong)


def test_every_route_is_in_the_matrix() -> None:
    app = create_app(ConversationSettings())
    documented = {f"{method.upper()} {path}" for path, item in app.openapi()["paths"].items() for method in item}
    covered = {case.route for case in CASES if not case.route.startswith("WS ")}
    assert documented - PUBLIC - covered == set(), "routes without a tenancy case"
    assert covered - documented == set(), "cases for routes the service does not have"
