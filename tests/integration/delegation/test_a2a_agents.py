"""The chat delegates to A2A agents: real A2A agents written on the reference SDK's server side
(``tests/support/a2a_agent.py``) and the Agent Service's own A2A server, each on loopback, behind the
real ConversationService (SQLite and PostgreSQL), followed through the chat's WebSocket.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from conversation_service.db.models import (
    ConversationAgentSession,
    DeadLetter,
    MessageStatus,
    TurnKind,
    TurnStatus,
)
from conversation_service.settings.a2a_agents import A2AAgentConfig, A2AAgentsSettings
from conversation_service.settings.routing import FALLBACK_NOTICE
from shared.breaker import BreakerState
from shared.transactions import transaction
from tests.integration.conversation_service.support import (
    FollowedTask,
    auth,
    connect,
    died_mid_turn,
    taking_over,
    turn_and_reply,
)
from tests.integration.delegation.stack import (
    AGENT_KEY,
    Stack,
    agent_service,
    chat_service,
    deltas_text,
    final_of,
    frames_of,
    recv_until,
)
from tests.support.a2a_agent import A2ATestAgent
from tests.support.dependencies import TcpRelay
from tests.support.servers import free_port, serve_app

TOKEN = "a2a-agent-token-0123456789"
NOWHERE = "http://127.0.0.1:9"  # the Agent Service is not used by these tests


@asynccontextmanager
async def a2a_agent(**options: Any) -> AsyncIterator[A2ATestAgent]:
    port = free_port()
    agent = A2ATestAgent(f"http://127.0.0.1:{port}", **options)
    async with serve_app(agent.app, port=port):
        yield agent


def agents(*configs: dict[str, Any], **settings: Any) -> A2AAgentsSettings:
    return A2AAgentsSettings(agents=[A2AAgentConfig(**c) for c in configs], **settings)


async def sessions_of(stack: Stack, cid: str) -> list[ConversationAgentSession]:
    async with transaction(stack.state.storage.sessionmaker) as session:
        rows = await session.scalars(select(ConversationAgentSession)
                                     .where(ConversationAgentSession.conversation_id == cid)
                                     .order_by(ConversationAgentSession.created_at))
        return list(rows)


async def dead_letters(stack: Stack) -> list[DeadLetter]:
    async with transaction(stack.state.storage.sessionmaker) as session:
        return list(await session.scalars(select(DeadLetter)))


def ended(frame: dict) -> bool:
    return frame["type"] in ("agent.complete", "agent.ask_user", "message.error") or (
        frame["type"] == "message.completed" and frame["data"].get("status") == "stopped")


def reply_of(frames: list[dict]) -> dict:
    return next(f["data"] for f in frames if f["type"] == "message.created" and f["data"]["role"] == "assistant")


@asynccontextmanager
async def chat_with_agent(database_url: str, *, name: str = "echo", serve: dict[str, Any] | None = None,
                          **config: Any) -> AsyncIterator[tuple[A2ATestAgent, Stack, str, Any]]:
    """An A2A agent (``serve``: how it runs) configured as ``name`` (``config``: the rest of its
    configuration), the chat, a conversation of alice's and her WebSocket on it."""
    async with (
        a2a_agent(**(serve or {})) as agent,
        chat_service(database_url, NOWHERE, a2a=agents({"name": name, "card_url": agent.card_url, **config})) as stack,
    ):
        cid = await stack.conversation()
        ws = await connect(stack.chat_url, cid, "alice")
        try:
            yield agent, stack, cid, ws
        finally:
            await ws.close()


@pytest.fixture
def sqlite_chat(tmp_path) -> str:
    """The chat's database for the tests whose subject is the A2A side, not the storage (each of
    the others runs on SQLite and PostgreSQL)."""
    return f"sqlite+aiosqlite:///{tmp_path}/chat.db"


async def test_an_a2a_agent_streams_its_answer_to_the_chat(database_factory):
    await _streams_its_answer(await database_factory("chat"), "JSONRPC")


async def test_the_http_json_binding_works_the_same(sqlite_chat):
    await _streams_its_answer(sqlite_chat, "HTTP+JSON")


async def _streams_its_answer(database_url: str, binding: str) -> None:
    async with chat_with_agent(database_url, serve={"bearer": TOKEN}, bearer_token=TOKEN,
                               binding=binding) as (agent, stack, cid, ws):
        r = await stack.send(cid, "/agent echo hello there")
        assert r.status_code == 202 and r.json()["route"] == {"target": "agent", "reason": "explicit_command"}
        frames = await recv_until(ws, ended)
        # No name after /agent: the conversation's open session keeps it with the same agent.
        r = await stack.send(cid, "and again")
        follow_up = await recv_until(ws, ended)
        rows = await sessions_of(stack, cid)

    reply = reply_of(frames)
    assert reply["agent_metadata"]["agent"] == "echo"  # the page shows which agent answers
    assert [f["data"]["text"] for f in frames_of(frames, "agent.thinking")] == ["Reading: hello there"]
    assert len(frames_of(frames, "message.delta")) >= 1
    assert deltas_text(frames, reply["id"]) == "Echo: hello there"
    assert final_of(frames, reply["id"])["data"]["content"] == "Echo: hello there"
    assert frames[-1]["type"] == "agent.complete"
    seqs = [f["seq"] for f in frames + follow_up]
    assert seqs == sorted(set(seqs))
    assert final_of(follow_up)["data"]["content"] == "Echo: and again"
    assert agent.log.texts == ["hello there", "and again"]
    # One session: the A2A contextId, the last task, the agent's name.
    [row] = rows
    assert row.agent_name == "echo" and row.agent_session_id and row.a2a_task_id == agent.log.finished[-1]


async def test_an_input_required_task_is_answered_through_the_answer_endpoint(database_factory):
    async with chat_with_agent(await database_factory("chat")) as (agent, stack, cid, ws):
        await stack.send(cid, "/agent echo ask me where to go")
        asked = await recv_until(ws, ended)
        question = frames_of(asked, "agent.ask_user")[0]["data"]
        r = await stack.answer(cid, question["question_id"], "Paris")
        assert r.status_code == 202, r.text
        answered = await recv_until(ws, ended)
        [row] = await sessions_of(stack, cid)

    assert question["question"] == "Which city?"
    assert final_of(answered)["data"]["content"] == "Booked a trip to Paris."
    # The answer went back as a message of the same task, which then ran to its end.
    assert agent.log.texts == ["ask me where to go", "Paris"]
    assert agent.log.finished == [row.a2a_task_id]
    assert row.status == "ACTIVE" or row.status == "COMPLETED"


async def test_a_stream_cut_mid_answer_is_resumed_without_missing_or_repeated_text(database_factory):
    port = free_port()
    relay = TcpRelay(port)
    await relay.start()
    # The agent's card names the relay's address: cutting the relay cuts the chat's stream.
    agent = A2ATestAgent(relay.url)
    try:
        async with (
            serve_app(agent.app, port=port),
            chat_service(await database_factory("chat"), NOWHERE,
                         a2a=agents({"name": "echo", "card_url": agent.card_url})) as stack,
        ):
            cid = await stack.conversation()
            ws = await connect(stack.chat_url, cid, "alice")
            await stack.send(cid, "/agent echo slow 40")
            frames: list[dict] = []
            while len(frames_of(frames, "message.delta")) < 5:
                frames += await recv_until(ws, lambda f: f["type"] == "message.delta")
            relay.cut()  # the connection dies mid-answer; the task goes on at the agent
            relay.restore()
            frames += await recv_until(ws, ended)
            await ws.close()
    finally:
        await relay.close()

    reply = reply_of(frames)
    expected = "".join(f"w{i} " for i in range(40))
    assert deltas_text(frames, reply["id"]) == expected  # each word once, none missing
    assert final_of(frames, reply["id"])["data"]["content"] == expected
    offsets = [f["data"]["offset"] for f in frames_of(frames, "message.delta")]
    assert offsets == sorted(set(offsets))
    assert len(agent.log.texts) == 1  # resumed by subscribing, not by sending the message again


async def test_stop_cancels_the_a2a_task(database_factory):
    async with chat_with_agent(await database_factory("chat")) as (agent, stack, cid, ws):
        await stack.send(cid, "/agent echo slow 400")
        frames = await recv_until(ws, lambda f: f["type"] == "message.delta")
        reply = reply_of(frames)
        r = await stack.http.post(f"{stack.chat_url}/conversations/{cid}/messages/{reply['id']}/stop",
                                  headers=auth("alice"))
        assert r.status_code == 202, r.text
        frames += await recv_until(ws, ended)
        [row] = await sessions_of(stack, cid)

    end = final_of(frames, reply["id"])["data"]
    assert end["status"] == "stopped" and end["content"] == deltas_text(frames, reply["id"])
    assert agent.log.cancelled == [row.a2a_task_id]
    assert not agent.log.finished


async def test_an_agent_that_declares_only_a2a_0_3_is_refused_with_a_clear_error(sqlite_chat):
    async with chat_with_agent(sqlite_chat, name="legacy",
                               serve={"protocol_version": "0.3"}) as (agent, stack, cid, ws):
        await stack.send(cid, "/agent legacy hello")
        frames = await recv_until(ws, ended)
        letters = await dead_letters(stack)
        breaker = stack.state.agent.targets.breaker("legacy")

    error = frames_of(frames, "message.error")[0]["data"]
    assert error["code"] == "A2AAgentIncompatible" and "legacy" in error["text"] and "A2A version" in error["text"]
    assert not agent.log.texts  # nothing was sent to it
    [letter] = letters
    assert "declares only protocol 0.3" in letter.error_detail and "A2A 1.0" in letter.error_detail
    assert breaker.state is BreakerState.CLOSED  # a refusal says nothing of the agent's health


async def test_an_agent_that_is_down_falls_back_to_the_direct_llm_then_opens_its_breaker(sqlite_chat):
    down = f"http://127.0.0.1:{free_port()}/.well-known/agent-card.json"
    async with chat_service(sqlite_chat, NOWHERE, delegation={"agent_breaker_failures": 1},
                            a2a=agents({"name": "gone", "card_url": down}, default_agent="gone")) as stack:
        cid = await stack.conversation()
        ws = await connect(stack.chat_url, cid, "alice")
        r = await stack.send(cid, "/agent what is 2+2")  # no name: the deployment's default agent
        assert r.json()["route"]["target"] == "agent"
        first = await recv_until(ws, lambda f: f["type"] == "message.completed")
        r = await stack.send(cid, "/agent gone are you back?")
        second_route = r.json()["route"]
        second = await recv_until(ws, lambda f: f["type"] == "message.completed")
        await ws.close()
        letters = await dead_letters(stack)
        breakers = stack.state.agent.targets
        metrics = (await stack.http.get(f"{stack.chat_url}/metrics")).text

    assert [f["data"]["text"] for f in frames_of(first, "notice")] == [FALLBACK_NOTICE]
    assert reply_of(first)["agent_metadata"]["fallback_from"] == "agent"
    assert [letter.error_code for letter in letters] == ["AgentConnectError"]
    # One failure opened this agent's breaker: the next message went straight to the direct LLM.
    assert breakers.breaker("gone").state is BreakerState.OPEN
    assert breakers.breaker(None).state is BreakerState.CLOSED  # the Agent Service's is its own
    # The operator sees it: the agent's own series, open (2), and its opening counted.
    assert 'conversation_a2a_agent_breaker_state{agent="gone"} 2.0' in metrics
    assert 'conversation_a2a_agent_breaker_transitions_total{agent="gone",state="open"} 1.0' in metrics
    assert "conversation_agent_breaker_state 0.0" in metrics
    assert second_route == {"target": "direct_llm", "reason": "agent_unavailable"}
    assert [f["data"]["text"] for f in frames_of(second, "notice")] == [FALLBACK_NOTICE]


async def test_an_organisation_s_default_agent_and_a_switch_by_name(sqlite_chat):
    async with (
        a2a_agent(name="First") as first, a2a_agent(name="Second") as second,
        chat_service(sqlite_chat, NOWHERE, a2a=agents(
            {"name": "first", "card_url": first.card_url}, {"name": "second", "card_url": second.card_url},
            org_agents={"acme": "first"})) as stack,
    ):
        cid = await stack.conversation()  # alice is in acme
        ws = await connect(stack.chat_url, cid, "alice")
        await stack.send(cid, "/agent hi")
        one = await recv_until(ws, ended)
        await stack.send(cid, "/agent second hi there")
        two = await recv_until(ws, ended)
        await ws.close()
        rows = await sessions_of(stack, cid)

    assert reply_of(one)["agent_metadata"]["agent"] == "first" and first.log.texts == ["hi"]
    assert reply_of(two)["agent_metadata"]["agent"] == "second" and second.log.texts == ["hi there"]
    assert [(r.agent_name, r.status) for r in rows] == [("first", "COMPLETED"), ("second", "ACTIVE")]


async def test_the_agent_service_reached_through_its_a2a_server(database_factory, tmp_path):
    async with agent_service(await database_factory("agent"), tmp_path) as agent_url:
        card = f"{agent_url}/.well-known/agent-card.json"
        async with chat_service(await database_factory("chat"), NOWHERE, a2a=agents(
                {"name": "taskforce", "card_url": card, "api_key": AGENT_KEY, "forward_user": True})) as stack:
            cid = await stack.conversation()
            ws = await connect(stack.chat_url, cid, "alice")
            await stack.send(cid, "/agent taskforce what is 17*23")
            frames = await recv_until(ws, ended)
            await stack.send(cid, "plan a trip")  # the open session: the agent asks where to
            asked = await recv_until(ws, ended)
            question = frames_of(asked, "agent.ask_user")[0]["data"]
            await stack.answer(cid, question["question_id"], "Lisbon for 3 days")
            answered = await recv_until(ws, ended)
            await ws.close()
            async with httpx.AsyncClient() as http:
                tasks = (await http.get(f"{agent_url}/a2a/v1/tasks", headers={
                    "X-API-Key": AGENT_KEY, "A2A-Version": "1.0"})).json()["tasks"]

    reply = reply_of(frames)
    assert reply["agent_metadata"]["agent"] == "taskforce"
    assert "391" in final_of(frames, reply["id"])["data"]["content"]
    assert deltas_text(frames, reply["id"]) == final_of(frames, reply["id"])["data"]["content"]
    assert frames_of(frames, "agent.thinking")  # its tool calls arrive as status messages: progress
    assert "Lisbon" in final_of(answered)["data"]["content"], [(f["type"], f["data"]) for f in answered]
    assert len(tasks) == 2 and {t["status"]["state"] for t in tasks} == {"TASK_STATE_COMPLETED"}
    assert len({t["contextId"] for t in tasks}) == 1  # one conversation, one A2A context


async def test_a_wrong_credential_fails_the_reply_and_keeps_the_breaker_closed(sqlite_chat):
    async with chat_with_agent(sqlite_chat, serve={"bearer": TOKEN},
                               bearer_token="not-the-token") as (agent, stack, cid, ws):
        await stack.send(cid, "/agent echo hello")
        frames = await recv_until(ws, ended)
        breaker = stack.state.agent.targets.breaker("echo")

    assert frames_of(frames, "message.error")[0]["data"]["code"] == "AgentAuthError"
    assert breaker.state is BreakerState.CLOSED and not agent.log.texts


async def _start_task_and_drop_it(agent: A2ATestAgent, words: int, keep: int) -> tuple[FollowedTask, str]:
    """Start ``slow <words>`` at the agent (configured as echo), read until ``keep`` chunks came, and
    hang up (as a replica that dies does): the task and the text read."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {"message": {
        "messageId": "m-dead", "role": "ROLE_USER", "parts": [{"text": f"slow {words}"}]}}}
    text, ids = "", {}
    async with httpx.AsyncClient() as http, http.stream(
            "POST", f"{agent.base_url}/jsonrpc", json=body, headers={"A2A-Version": "1.0"}) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            result = json.loads(line[5:])["result"]
            if "task" in result:
                ids = {"task": result["task"]["id"], "context": result["task"]["contextId"]}
            elif "artifactUpdate" in result:
                text += result["artifactUpdate"]["artifact"]["parts"][0]["text"]
                keep -= 1
                if keep == 0:
                    break
    return FollowedTask("echo", ids["task"], ids["context"]), text


async def test_a_turn_taken_over_subscribes_to_the_task_and_sends_on_the_rest(database_url):
    async with a2a_agent() as agent:
        task, read = await _start_task_and_drop_it(agent, 30, keep=3)
        ids = await died_mid_turn(database_url, kind=TurnKind.AGENT.value, text="/agent echo slow", task=task,
                                  reply=(MessageStatus.STREAMING.value, ""),
                                  deltas=["w0 ", "w1 "])  # one chunk unstored
        async with taking_over(database_url, ids, lambda f: f["type"] == "message.completed",
                               a2a=agents({"name": "echo", "card_url": agent.card_url})) as (app, frames):
            await app.state.tasks.join()  # the takeover marks the turn done once its end is out
            turn, message = await turn_and_reply(app, ids)

    expected = "".join(f"w{i} " for i in range(30))
    assert read == "w0 w1 w2 "
    deltas = [f["data"] for f in frames_of(frames, "message.delta")]
    # The stored deltas, then the rest from the text they end at: the chunk shown live but never
    # stored ("w2 ") comes again at its offset, and nothing else twice.
    assert [d["offset"] for d in deltas[:2]] == [0, 3] and deltas[2]["offset"] == 6
    assert "".join(d["text"] for d in deltas) == expected, [(d["offset"], d["text"]) for d in deltas]
    assert final_of(frames, ids["reply"])["data"]["content"] == expected
    assert (message.status, message.content) == (MessageStatus.COMPLETE.value, expected)
    assert turn.status == TurnStatus.DONE.value and turn.takeovers == 1
    assert agent.log.texts == ["slow 30"]  # taken over by subscribing, not by sending the message again
