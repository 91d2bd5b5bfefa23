"""The Agent Service's tenancy matrix: every route of its OpenAPI document, every route of the A2A HTTP+JSON
binding and every method of the JSON-RPC binding, against every kind of caller, on SQLite and PostgreSQL,
with a real OpenID Provider. A route or method that is not in the matrix fails it: a new door is born with
its owner check, or this test says it has none.

The owner is the chat (a service key allowed for the organisation acme) acting for alice@acme. The callers:

- ``owner``: that service; ``alice``: alice's own access token (her sessions are hers, whoever started them);
  ``full_trust``: a plain ``AGENT_SERVICE_API_KEYS`` key (the compatibility key, root by design);
- ``carol``: a user of acme, another user of the same organisation; ``bob``: a user of globex;
  ``reports``: a service limited to globex; ``partner``: an A2A agent bound to acme, another principal;
- ``id_token``: alice's ID token, whose audience is the Agent Service's (a single-app registration);
  ``none``: no credential.

What each gets is one of OK (2xx), HIDDEN (404, A2A TaskNotFound, or a list without the owner's), FORBIDDEN
(403: it may not act for alice) and UNAUTH (401). No answer but an OK one holds anything of the owner's: her
secret (``SECRET``) or her answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from agent_service.a2a import jsonrpc
from agent_service.a2a import router as a2a_router
from agent_service.a2a.card import JSONRPC_PATH, REST_PATH
from agent_service.app import create_app
from agent_service.settings import AgentOIDCSettings, AgentServiceSettings, CallerKeySettings
from shared.llm.builtin import BuiltinProvider
from tests.integration.access.support import SECRET, USERS, alices_memory, require_backend
from tests.support.databases import backends, fresh_database
from tests.support.oidc_provider import (
    AGENT_AUDIENCE,
    AGENT_UI,
    ORG_CLAIM,
    PERMISSIONS_CLAIM,
    ProviderConfig,
    running_provider,
)
from tests.support.servers import serve_app

VERSION = {"A2A-Version": "1.0"}
KEYS = {"owner": "chat-key-0123456789", "reports": "reports-key-0123456789", "partner": "partner-key-0123456789",
        "full_trust": "legacy-key-0123456789"}
ALICE = {"user_id": "alice", "org_id": "acme"}


class Outcome(Enum):
    OK = "ok"
    HIDDEN = "hidden"
    FORBIDDEN = "forbidden"
    UNAUTH = "unauthenticated"
    # An operation this agent does not offer (push notifications, the extended card): its A2A error.
    UNSUPPORTED = "unsupported"


OK, HIDDEN, FORBIDDEN, UNAUTH, UNSUPPORTED = (
    Outcome.OK, Outcome.HIDDEN, Outcome.FORBIDDEN, Outcome.UNAUTH, Outcome.UNSUPPORTED,
)
SUBJECTS = ("owner", "alice", "full_trust", "carol", "bob", "reports", "partner", "id_token", "none")
SEES = ("owner", "alice", "full_trust")
# A resource route: who sees it, sees it; everyone else is told it is not there.
RESOURCE = {s: OK if s in SEES else HIDDEN for s in SUBJECTS} | {"id_token": UNAUTH, "none": UNAUTH}
# A route that names the user it acts for (alice): who may not act for her is refused, 403.
ACTS_FOR_ALICE = {s: OK if s in SEES else FORBIDDEN for s in SUBJECTS} | {"id_token": UNAUTH, "none": UNAUTH}
# A list: everyone authenticated gets one, with the owner's only for those who see them.
LIST = RESOURCE
# Not a resource: any authenticated caller.
ANYONE = {s: OK for s in SUBJECTS} | {"id_token": UNAUTH, "none": UNAUTH}
NOT_OFFERED = {s: UNSUPPORTED for s in SUBJECTS} | {"id_token": UNAUTH, "none": UNAUTH}


def callers() -> list[CallerKeySettings]:
    def entry(name: str, **options: Any) -> CallerKeySettings:
        return CallerKeySettings(name=name, key_sha256=hashlib.sha256(KEYS[name].encode()).hexdigest(), **options)

    return [entry("owner", kind="service", orgs=["acme"]), entry("reports", kind="service", orgs=["globex"]),
            entry("partner", kind="agent", orgs=["acme"])]


@dataclass
class World:
    http: httpx.AsyncClient
    headers: dict[str, dict[str, str]]
    app: Any
    session_id: str = ""
    task_id: str = ""
    context_id: str = ""
    answer: str = ""
    # Every task the owner made: a list that holds one of them shows the owner's.
    made: set[str] = field(default_factory=set)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def next_id(self) -> str:
        return f"m-{next(self._ids)}"

    # -- what the owner makes -----------------------------------------------------------------

    async def execute(self, subject: str, body: dict[str, Any]) -> httpx.Response:
        """An execute, read to its end (its run is over when this returns)."""
        response = await self.http.post("/api/v1/agent/execute", json=body, headers=self.headers[subject])
        return response

    async def owners_session(self, message: str) -> str:
        response = await self.execute("owner", {"profile_name": "default", "message": message, "user_context": ALICE})
        assert response.status_code == 200, response.text
        return response.headers["X-Session-ID"]

    async def waiting_session(self) -> str:
        """A session of alice's whose run asks her something (it can be cancelled)."""
        session_id = await self.owners_session("plan a trip")
        status = (await self.http.get(f"/api/v1/agent/sessions/{session_id}", headers=self.headers["owner"])).json()
        assert status["status"] == "AWAITING_USER", status
        return session_id

    async def rpc(self, subject: str, method: str, params: dict[str, Any]) -> httpx.Response:
        return await self.http.post(JSONRPC_PATH, headers=self.headers[subject] | VERSION,
                                    json={"jsonrpc": "2.0", "id": self.next_id(), "method": method, "params": params})

    async def owners_task(self, text: str, context_id: str | None = None) -> dict[str, Any]:
        message = {"role": "ROLE_USER", "parts": [{"text": text}], "messageId": self.next_id()}
        if context_id is not None:
            message["contextId"] = context_id
        response = await self.rpc("owner", "SendMessage", {"message": message, "metadata": {"userId": "alice", "orgId": "acme"}})
        assert response.status_code == 200 and "result" in response.json(), response.text
        task = response.json()["result"]["task"]
        self.made.add(task["id"])
        return task

    async def waiting_task(self) -> str:
        task = await self.owners_task("plan a trip")
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task
        return task["id"]

    async def memory(self) -> int:
        return await alices_memory(self.app)


@pytest.fixture(scope="module", params=backends())
async def world(request, tmp_path_factory) -> AsyncIterator[World]:
    require_backend(request.param)
    tmp: Path = tmp_path_factory.mktemp(f"tenancy-{request.param}")
    async with running_provider(tmp, ProviderConfig(users=USERS)) as provider, fresh_database(request.param, tmp) as url:
        settings = AgentServiceSettings(
            database_url=url, migrate_on_start=True, knowledge_dir=tmp / "no-docs", api_keys=[KEYS["full_trust"]],
            callers=callers(), auth_oidc=AgentOIDCSettings(
                issuer=provider.issuer, audience=AGENT_AUDIENCE, org_claim=ORG_CLAIM, permissions_claim=PERMISSIONS_CLAIM,
            ),
        )
        app = create_app(settings, provider=BuiltinProvider(first_token_delay=0, chunk_delay=0))
        tokens = {user: await provider.user_tokens(user, AGENT_UI, scope="openid profile agent") for user in USERS}
        headers = {name: {"X-API-Key": key} for name, key in KEYS.items()}
        headers |= {user: {"Authorization": f"Bearer {tokens[user]['access_token']}"} for user in ("alice", "carol", "bob")}
        headers |= {"id_token": {"Authorization": f"Bearer {tokens['alice']['id_token']}"}, "none": {}}
        async with serve_app(app) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
            world = World(http=http, headers=headers, app=app)
            world.session_id = await world.owners_session(f"my name is Alice {SECRET}")
            task = await world.owners_task(f"my name is Alice {SECRET}", context_id="alices-context")
            world.task_id, world.context_id = task["id"], task["contextId"]
            asked = await world.owners_task("what is my name?", context_id=world.context_id)
            world.answer = "".join(p.get("text", "") for a in asked.get("artifacts", []) for p in a["parts"])
            assert SECRET in world.answer, asked  # the probe can find the secret where it may
            yield world


# -- the cases ------------------------------------------------------------------------------------

Request = Callable[[World, str], Awaitable[httpx.Response]]
# After a refused request: the resource it aimed at is as it was.
Intact = Callable[[World, Any], Awaitable[None]]


@dataclass(frozen=True)
class Case:
    """One door: ``route`` as the OpenAPI document or the A2A router names it (``METHOD path``), or
    ``jsonrpc:<Method>``; ``target`` makes what it acts on (None: the shared resources), ``call`` calls
    it as a subject, ``intact`` checks a refused call changed nothing."""

    route: str
    expect: dict[str, Outcome]
    call: Callable[[World, str, Any], Awaitable[httpx.Response]]
    target: Callable[[World], Awaitable[Any]] | None = None
    intact: Intact | None = None
    # An A2A list answers 200 to everyone: HIDDEN is then "the owner's task is not in it".
    lists_tasks: bool = False


async def _session_status(world: World, session_id: str) -> str:
    return (await world.http.get(f"/api/v1/agent/sessions/{session_id}", headers=world.headers["owner"])).json()["status"]


async def _still_waiting(world: World, session_id: str) -> None:
    assert await _session_status(world, session_id) == "AWAITING_USER"


async def _task_still_waiting(world: World, task_id: str) -> None:
    task = (await world.rpc("owner", "GetTask", {"id": task_id})).json()["result"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task


async def _memory_kept(world: World, memory_id: int) -> None:
    listed = (await world.http.get("/api/v1/agent/memory", params=ALICE, headers=world.headers["owner"])).json()
    assert memory_id in [m["id"] for m in listed["items"]]


def _own_user(subject: str) -> dict[str, Any]:
    """The user a subject acts as when it acts for itself (a service: a user of its own organisation)."""
    return {"owner": ALICE, "alice": ALICE, "full_trust": ALICE, "carol": {"user_id": "carol", "org_id": "acme"},
            "bob": {"user_id": "bob", "org_id": "globex"}, "reports": {"user_id": "dave", "org_id": "globex"},
            "partner": {"user_id": "partner", "org_id": "acme"}}.get(subject, ALICE)


async def _stream_status(
    world: World, subject: str, method: str, url: str, *, to_end: bool, **kwargs: Any,
) -> httpx.Response:
    """A stream's status and its first event, or (``to_end``: a run's, which ends) all of it."""
    request = world.http.build_request(method, url, headers=world.headers[subject] | kwargs.pop("headers", {}), **kwargs)
    response = await world.http.send(request, stream=True)
    try:
        body = b""
        async with asyncio.timeout(30):
            async for chunk in response.aiter_bytes():
                body += chunk
                if not to_end and (response.status_code != 200 or b"\n\n" in body):
                    break
        return httpx.Response(response.status_code, headers=response.headers, content=body)
    finally:
        await response.aclose()


def _message(world: World, subject: str, text: str, **extra: Any) -> dict[str, Any]:
    """An A2A message; a service names the user it acts for (alice, or for reports a user of globex)."""
    message = {"message": {"role": "ROLE_USER", "parts": [{"text": text}], "messageId": world.next_id(), **extra}}
    if subject in ("owner", "full_trust", "reports"):
        user = _own_user(subject)
        message["metadata"] = {"userId": user["user_id"], "orgId": user["org_id"]}
    return message


def _rest(method: str, path: str, body: Callable[[World, str, Any], dict] | None = None, stream: str | None = None):
    async def call(world: World, subject: str, target: Any) -> httpx.Response:
        url = REST_PATH + path.format(task=target or world.task_id, context=world.context_id)
        json = body(world, subject, target) if body is not None else None
        if stream:
            return await _stream_status(world, subject, method, url, json=json, headers=VERSION, to_end=stream == "run")
        return await world.http.request(method, url, json=json, headers=world.headers[subject] | VERSION)

    return call


def _rpc(method: str, params: Callable[[World, str, Any], dict], stream: str | None = None):
    async def call(world: World, subject: str, target: Any) -> httpx.Response:
        body = {"jsonrpc": "2.0", "id": world.next_id(), "method": method, "params": params(world, subject, target)}
        if stream:
            return await _stream_status(world, subject, "POST", JSONRPC_PATH, json=body, headers=VERSION,
                                        to_end=stream == "run")
        return await world.http.post(JSONRPC_PATH, json=body, headers=world.headers[subject] | VERSION)

    return call


def _api(method: str, path: str, *, params: dict | None = None, body: Callable[[World, str, Any], dict] | None = None,
         stream: bool = False):
    async def call(world: World, subject: str, target: Any) -> httpx.Response:
        url = path.format(session=target or world.session_id, memory=target)
        json = body(world, subject, target) if body is not None else None
        if stream:
            return await _stream_status(world, subject, method, url, params=params, to_end=False)
        return await world.http.request(method, url, params=params, json=json, headers=world.headers[subject])

    return call


def _continue_as_alice(world: World, subject: str, _target: Any) -> dict:
    return {"session_id": world.session_id, "profile_name": "default", "message": "what is my name?", "user_context": ALICE}


def _continue_as_self(world: World, subject: str, _target: Any) -> dict:
    return {"session_id": world.session_id, "profile_name": "default", "message": "what is my name?",
            "user_context": _own_user(subject)}


# Continuing alice's context as oneself: a context of one's own (OK), never hers (no secret in it).
CONTINUE_CONTEXT = {s: OK for s in SUBJECTS} | {"id_token": UNAUTH, "none": UNAUTH}

CASES = [
    Case("POST /api/v1/agent/execute", ACTS_FOR_ALICE, _api("POST", "/api/v1/agent/execute", body=_continue_as_alice)),
    Case("POST /api/v1/agent/execute#as-self", RESOURCE | {"alice": OK},
         _api("POST", "/api/v1/agent/execute", body=_continue_as_self)),
    Case("GET /api/v1/agent/sessions/{session_id}", RESOURCE, _api("GET", "/api/v1/agent/sessions/{session}")),
    Case("GET /api/v1/agent/sessions/{session_id}/events", RESOURCE,
         _api("GET", "/api/v1/agent/sessions/{session}/events", stream=True)),
    Case("POST /api/v1/agent/sessions/{session_id}/cancel", RESOURCE,
         _api("POST", "/api/v1/agent/sessions/{session}/cancel"), target=World.waiting_session, intact=_still_waiting),
    Case("GET /api/v1/agent/profiles", ANYONE, _api("GET", "/api/v1/agent/profiles")),
    Case("GET /api/v1/agent/memory", ACTS_FOR_ALICE, _api("GET", "/api/v1/agent/memory", params=ALICE),
         target=World.memory, intact=_memory_kept),
    Case("DELETE /api/v1/agent/memory", ACTS_FOR_ALICE, _api("DELETE", "/api/v1/agent/memory", params=ALICE),
         target=World.memory, intact=_memory_kept),
    Case("DELETE /api/v1/agent/memory/{memory_id}", ACTS_FOR_ALICE,
         _api("DELETE", "/api/v1/agent/memory/{memory}", params=ALICE), target=World.memory, intact=_memory_kept),
    # A2A, HTTP+JSON
    Case("GET /a2a/v1/tasks/{id}", RESOURCE, _rest("GET", "/tasks/{task}")),
    Case("GET /a2a/v1/tasks", LIST, _rest("GET", "/tasks"), lists_tasks=True),
    Case("GET /a2a/v1/tasks#context", LIST, _rest("GET", "/tasks?contextId={context}"), lists_tasks=True),
    Case("POST /a2a/v1/tasks/{id}:cancel", RESOURCE, _rest("POST", "/tasks/{task}:cancel", lambda w, s, t: {}),
         target=World.waiting_task, intact=_task_still_waiting),
    Case("POST /a2a/v1/tasks/{id}:subscribe", RESOURCE, _rest("POST", "/tasks/{task}:subscribe", stream="first"),
         target=World.waiting_task),
    Case("POST /a2a/v1/message:send", RESOURCE,
         _rest("POST", "/message:send", lambda w, s, t: _message(w, s, "Lisbon", taskId=t)),
         target=World.waiting_task, intact=_task_still_waiting),
    Case("POST /a2a/v1/message:send#context", CONTINUE_CONTEXT,
         _rest("POST", "/message:send", lambda w, s, t: _message(w, s, "what is my name?", contextId=w.context_id))),
    Case("POST /a2a/v1/message:stream", CONTINUE_CONTEXT,
         _rest("POST", "/message:stream", lambda w, s, t: _message(w, s, "what is my name?", contextId=w.context_id),
               stream="run")),
    Case("GET /a2a/v1/tasks/{id}/pushNotificationConfigs", NOT_OFFERED, _rest("GET", "/tasks/{task}/pushNotificationConfigs")),
    Case("POST /a2a/v1/tasks/{id}/pushNotificationConfigs", NOT_OFFERED,
         _rest("POST", "/tasks/{task}/pushNotificationConfigs", lambda w, s, t: {})),
    Case("GET /a2a/v1/tasks/{id}/pushNotificationConfigs/{config_id}", NOT_OFFERED,
         _rest("GET", "/tasks/{task}/pushNotificationConfigs/c1")),
    Case("DELETE /a2a/v1/tasks/{id}/pushNotificationConfigs/{config_id}", NOT_OFFERED,
         _rest("DELETE", "/tasks/{task}/pushNotificationConfigs/c1")),
    Case("GET /a2a/v1/extendedAgentCard", NOT_OFFERED, _rest("GET", "/extendedAgentCard")),
    # A2A, JSON-RPC
    Case("jsonrpc:GetTask", RESOURCE, _rpc("GetTask", lambda w, s, t: {"id": w.task_id})),
    Case("jsonrpc:ListTasks", LIST, _rpc("ListTasks", lambda w, s, t: {}), lists_tasks=True),
    Case("jsonrpc:ListTasks#context", LIST, _rpc("ListTasks", lambda w, s, t: {"contextId": w.context_id}), lists_tasks=True),
    Case("jsonrpc:CancelTask", RESOURCE, _rpc("CancelTask", lambda w, s, t: {"id": t}), target=World.waiting_task,
         intact=_task_still_waiting),
    Case("jsonrpc:SubscribeToTask", RESOURCE, _rpc("SubscribeToTask", lambda w, s, t: {"id": t}, stream="first"),
         target=World.waiting_task),
    Case("jsonrpc:SendMessage", RESOURCE, _rpc("SendMessage", lambda w, s, t: _message(w, s, "Lisbon", taskId=t)),
         target=World.waiting_task, intact=_task_still_waiting),
    Case("jsonrpc:SendMessage#context", CONTINUE_CONTEXT,
         _rpc("SendMessage", lambda w, s, t: _message(w, s, "what is my name?", contextId=w.context_id))),
    Case("jsonrpc:SendStreamingMessage", CONTINUE_CONTEXT,
         _rpc("SendStreamingMessage", lambda w, s, t: _message(w, s, "what is my name?", contextId=w.context_id), stream="run")),
    *(Case(f"jsonrpc:{method}", NOT_OFFERED, _rpc(method, lambda w, s, t: {"taskId": w.task_id}))
      for method in sorted(jsonrpc.METHODS - {"GetTask", "ListTasks", "CancelTask", "SubscribeToTask", "SendMessage",
                                               "SendStreamingMessage"})),
]
# Open on purpose (probes and docs): no credential, nothing of anyone's.
PUBLIC = {"GET /health", "GET /ready", "GET /metrics", "GET /.well-known/agent-card.json"}


def _outcome(response: httpx.Response, case: Case, world: World) -> Outcome | str:
    """What an answer was, in the matrix's terms (a string: something else, shown as it is)."""
    status = response.status_code
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    body = _json(response)
    error = body.get("error") if isinstance(body, dict) and "jsonrpc" in body else None
    if error is not None:
        return {-32001: HIDDEN, -32003: UNSUPPORTED, -32004: UNSUPPORTED}.get(error["code"], f"JSON-RPC error {error}")
    if status == 400 and _reason(body) in ("PUSH_NOTIFICATION_NOT_SUPPORTED", "UNSUPPORTED_OPERATION"):
        return UNSUPPORTED
    if not 200 <= status < 300:
        return f"status {status}"
    if case.lists_tasks:
        listed = body.get("result", body) if isinstance(body, dict) else {}
        return OK if world.made & {task["id"] for task in listed.get("tasks", [])} else HIDDEN
    return OK


_BY_STATUS = {401: UNAUTH, 403: FORBIDDEN, 404: HIDDEN}


def _reason(body: Any) -> str | None:
    """The ErrorInfo reason of an AIP-193 error body (the HTTP+JSON binding)."""
    details = body.get("error", {}).get("details", []) if isinstance(body, dict) else []
    return next((d.get("reason") for d in details if isinstance(d, dict)), None)


def _json(response: httpx.Response) -> Any:
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return None


@pytest.mark.parametrize("case", CASES, ids=[case.route for case in CASES])
async def test_every_door_checks_its_caller(world: World, case: Case) -> None:
    wrong = []
    for subject in SUBJECTS:
        target = await case.target(world) if case.target is not None else None
        response = await case.call(world, subject, target)
        got, expected = _outcome(response, case, world), case.expect[subject]
        if got is not expected:
            wrong.append(f"{subject}: expected {expected.value}, got {getattr(got, 'value', got)} "
                         f"({response.status_code} {response.text[:300]})")
            continue
        if got is not OK or case.expect is CONTINUE_CONTEXT and subject not in SEES:
            # Nothing of the owner's in a refusal, nor in what another caller's own context answers.
            leaked = [marker for marker in (SECRET, world.answer) if marker and marker in response.text]
            if leaked:
                wrong.append(f"{subject}: the answer holds the owner's {leaked}: {response.text[:300]}")
        if got is not OK and case.intact is not None:
            await case.intact(world, target)
    assert wrong == [], f"{case.route}:\n" + "\n".join(wrong)


def test_every_route_and_method_is_in_the_matrix() -> None:
    """Generated from the service itself: its OpenAPI document, the A2A router's routes and the JSON-RPC
    methods. A door added without a case here fails."""
    app = create_app(AgentServiceSettings(api_keys=["k"]))
    documented = {f"{method.upper()} {path}" for path, item in app.openapi()["paths"].items() for method in item}
    a2a_rest = {
        f"{method} {route.path}" for route in a2a_router.router.routes
        if route.path.startswith(REST_PATH) for method in route.methods
    }
    doors = {*documented, *a2a_rest, *(f"jsonrpc:{method}" for method in jsonrpc.METHODS)}
    covered = {case.route.split("#")[0] for case in CASES}
    assert doors - PUBLIC - covered == set(), "doors without a tenancy case"
    assert covered - doors == set(), "cases for doors the service does not have"
