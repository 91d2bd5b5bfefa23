"""An Agent Service at capacity, seen from the chat (both services real, SQLite and PostgreSQL): the run
that waits for a place shows on the page as ``agent.waiting`` with limit capacity, like a rate-limit
wait, and its reply then streams and completes."""

from __future__ import annotations

import websockets

from shared.llm.builtin import BuiltinProvider
from tests.integration.conversation_service.support import auth, ws_url
from tests.integration.delegation.stack import agent_service, chat_service, recv_until

ENDS = ("agent.complete", "agent.error")


async def test_a_run_waiting_for_a_place_shows_as_agent_waiting_then_completes(database_factory, tmp_path) -> None:
    agent_db, chat_db = await database_factory("agent"), await database_factory("chat")
    # A reply takes a second or so: the first run holds the one place while the second is sent.
    slow = BuiltinProvider(first_token_delay=0, chunk_delay=0.05)
    async with agent_service(agent_db, tmp_path, provider=slow, max_runs_in_flight=1) as agent_url, \
            chat_service(chat_db, agent_url) as stack:
        first, second = await stack.conversation("alice"), await stack.conversation("bob")
        ws_first = await websockets.connect(ws_url(stack.chat_url, first), additional_headers=auth("alice"))
        ws_second = await websockets.connect(ws_url(stack.chat_url, second), additional_headers=auth("bob"))
        assert (await stack.send(first, "/agent tell me about the weather", user="alice")).status_code == 202
        await recv_until(ws_first, lambda f: f["type"] == "message.delta")
        sent = await stack.send(second, "/agent tell me about the weather", user="bob")
        assert sent.status_code == 202 and sent.json()["route"]["target"] == "agent", sent.text

        frames = await recv_until(ws_second, lambda f: f["type"] in ENDS, timeout=30)
        types = [f["type"] for f in frames]
        assert frames[-1]["type"] == "agent.complete", types
        [waiting, *_] = [f for f in frames if f["type"] == "agent.waiting"]
        assert waiting["data"]["limit"] == "capacity" and "capacity" in waiting["data"]["reason"]
        assert waiting["data"]["message_id"] and waiting["data"]["until"]
        assert types.index("agent.waiting") < types.index("message.delta")
        assert (await recv_until(ws_first, lambda f: f["type"] in ENDS, timeout=30))[-1]["type"] == "agent.complete"
        await ws_first.close()
        await ws_second.close()
