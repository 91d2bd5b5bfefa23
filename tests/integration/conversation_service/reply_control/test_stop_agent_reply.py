"""Stop an agent reply, both services real on loopback: the Agent Service's run ends CANCELLED, the
message ends ``stopped`` with its text so far for every client and in storage, and the next answer
(regenerate) is a new run, not the cancelled one joined again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from agent_service.app import create_app as create_agent_app
from agent_service.settings import AgentServiceSettings
from conversation_service.agent_sessions.repository import AgentSessionRepository
from conversation_service.db.models import AgentSessionStatus
from shared.llm.builtin import BuiltinProvider
from shared.protocol import SessionStatus
from shared.transactions import transaction
from tests.integration.conversation_service.support import auth, collect_until, connect
from tests.integration.delegation.stack import AGENT_KEY, chat_service
from tests.support.servers import serve_app

QUESTION = "/agent tell me everything about the ocean tides and the moon"


@asynccontextmanager
async def paced_agent_service(database_url: str, tmp_path, chunk_delay: float) -> AsyncIterator[str]:
    """The Agent Service with the built-in model writing a word every ``chunk_delay`` seconds."""
    settings = AgentServiceSettings(database_url=database_url, api_keys=[AGENT_KEY], migrate_on_start=True,
                                    knowledge_dir=tmp_path / "no-docs")
    app = create_agent_app(settings, provider=BuiltinProvider(first_token_delay=0, chunk_delay=chunk_delay))
    async with serve_app(app) as url:
        yield url


def _ended(frame: dict) -> bool:
    return frame["type"] in ("message.completed", "message.error")


def _deltas(frames: list[dict], message_id: str) -> str:
    text = ""
    for f in frames:
        if f["type"] == "message.delta" and f["data"]["message_id"] == message_id:
            text = text[: f["data"]["offset"]] + f["data"]["text"]
    return text


async def test_stop_cancels_the_agent_run_and_ends_the_reply_stopped(database_factory, tmp_path) -> None:
    async with AsyncExitStack() as stack:
        agent_url = await stack.enter_async_context(
            paced_agent_service(await database_factory("agent"), tmp_path, chunk_delay=0.2))
        chat = await stack.enter_async_context(chat_service(await database_factory("chat"), agent_url))
        cid = await chat.conversation()
        tab1 = await stack.enter_async_context(await connect(chat.chat_url, cid, "alice"))
        tab2 = await stack.enter_async_context(await connect(chat.chat_url, cid, "alice"))
        sent = await chat.send(cid, QUESTION)
        assert sent.status_code == 202 and sent.json()["route"]["target"] == "agent"
        before = await collect_until(tab1, lambda f: f["type"] == "message.delta")
        reply_id = before[-1]["data"]["message_id"]

        stopped = await chat.http.post(f"{chat.chat_url}/conversations/{cid}/messages/{reply_id}/stop",
                                       headers=auth("alice"))
        assert stopped.status_code == 202, stopped.text
        frames1 = before + await collect_until(tab1, _ended)
        frames2 = await collect_until(tab2, _ended)
        await chat.state.tasks.join()
        items = (await chat.http.get(f"{chat.chat_url}/conversations/{cid}/messages", headers=auth("alice"))).json()
        reply = items["items"][-1]
        run = await chat.state.agent_client.get_session_status(reply["agent_session_id"])
        async with transaction(chat.state.storage.sessionmaker) as session:
            row = await AgentSessionRepository(session).get_by_agent_session_id(reply["agent_session_id"])

        # Another answer in its place is a new run: the cancelled one is not joined again.
        regenerated = await chat.http.post(f"{chat.chat_url}/conversations/{cid}/messages/{reply_id}/regenerate",
                                           headers=auth("alice"))
        again = await collect_until(tab1, lambda f: f["type"] == "message.delta", timeout=20)
        new_id = again[-1]["data"]["message_id"]
        await chat.http.post(f"{chat.chat_url}/conversations/{cid}/messages/{new_id}/stop", headers=auth("alice"))
        await collect_until(tab1, _ended)
        await chat.state.tasks.join()

    assert run.status is SessionStatus.CANCELLED
    for frames in (frames1, frames2):
        end = frames[-1]
        assert end["type"] == "message.completed" and end["data"]["message_id"] == reply_id
        assert end["data"]["status"] == "stopped"
        assert end["data"]["content"] and end["data"]["content"] == _deltas(frames, reply_id)
        # Stopped is not a failure: no error frame of the agent reached the page.
        assert not [f for f in frames if f["type"] in ("agent.error", "message.error")]
    assert (reply["id"], reply["status"], reply["content"]) == (reply_id, "stopped", frames1[-1]["data"]["content"])
    assert row is not None and row.status == AgentSessionStatus.COMPLETED.value
    assert chat.state.metrics.registry.get_sample_value("conversation_agent_turns_total", {"outcome": "stopped"}) >= 1
    assert regenerated.status_code == 202, regenerated.text
    assert new_id != reply_id
