"""``python -m conversation_service dead-letters list | show ID | replay ID`` as an operator runs it:
a subprocess against the real database, the running ConversationService and a real Agent Service on
loopback (docs/operations.md, "Replaying dead letters").

While the Agent Service is down, two delegated messages fall back to the direct LLM and become dead
letters. Once it is up, ``replay`` delegates the first again: the agent's answer shows in the
conversation, live on its WebSocket and in its messages, and the letter is marked replayed. A second
replay of it is refused, and of two replays of the other letter started at once exactly one runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import httpx
import websockets

from conversation_service.realtime.frames import FrameType
from tests.integration.conversation_service.support import (
    SECRET,
    auth,
    collect_until,
    new_conversation,
    ws_url,
)
from tests.support.servers import REPO_ROOT, ServiceProcess, free_port

AGENT_KEY = "agent-key-for-replays"
OPERATOR_KEY = "operator-key-for-replays"


async def cli(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "conversation_service", "dead-letters", *args, cwd=REPO_ROOT,
        env={**os.environ, **env}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(120):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def post(http: httpx.AsyncClient, base: str, cid: str, content: str) -> str:
    r = await http.post(f"{base}/conversations/{cid}/messages", json={"content": content}, headers=auth("alice"))
    assert r.status_code == 202, r.text
    assert r.json()["route"]["target"] == "agent"
    return r.json()["message_id"]


async def test_dead_letters_are_listed_shown_and_replayed_once(database_factory, tmp_path: Path) -> None:
    chat_db, agent_db = await database_factory("chat"), await database_factory("agent")
    agent_port = free_port()
    env = {
        "CONVERSATION_DATABASE_URL": chat_db, "AUTH_JWT_SECRET": SECRET, "MIGRATE_ON_START": "true",
        "REDIS_URL": "", "AGENT_SERVICE_URL": f"http://127.0.0.1:{agent_port}", "AGENT_SERVICE_API_KEY": AGENT_KEY,
        "AGENT_RETRY_DELAYS_S": "0.05", "OPERATOR_API_KEY": OPERATOR_KEY,
    }
    chat = ServiceProcess("conversation_service", env)
    agent = ServiceProcess("agent_service", {
        "AGENT_SERVICE_DATABASE_URL": agent_db, "AGENT_SERVICE_API_KEYS": AGENT_KEY,
        "AGENT_SERVICE_MIGRATE_ON_START": "true",
    }, port=agent_port)
    await chat.start(tmp_path)
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            cid = (await new_conversation(http, chat.url, "alice"))["id"]
            async with websockets.connect(ws_url(chat.url, cid, 0), additional_headers=auth("alice")) as ws:
                # The Agent Service is down: each message falls back to the direct LLM, after its dead letter.
                first = await post(http, chat.url, cid, "/agent what is 17*23")
                await collect_until(ws, lambda f: f["type"] == FrameType.MESSAGE_COMPLETED, timeout=30)
                second = await post(http, chat.url, cid, "/agent what is 6*7")
                frames = await collect_until(ws, lambda f: f["type"] == FrameType.MESSAGE_COMPLETED, timeout=30)

                code, out, err = await cli(env, "list")
                assert code == 0, err
                lines = [line.split("\t") for line in out.splitlines()]
                assert [line[-1] for line in lines] == ["pending", "pending"], out
                assert all(line[2] == "AgentConnectError" for line in lines), out
                code, out, err = await cli(env, "show", lines[0][0])
                assert code == 0, err
                shown = json.loads(out)
                newest_id, oldest_id = lines[0][0], lines[1][0]
                assert shown["message_id"] == second and shown["payload"]["message"] == "what is 6*7"
                assert shown["replayed_at"] is None and shown["state"] == "pending"
                code, _, err = await cli(env, "show", "no-such-letter")
                assert code == 1 and "no dead letter" in err

                await agent.start(tmp_path)
                code, out, err = await cli(env, "replay", oldest_id, "--url", chat.url)
                assert code == 0, err
                result = json.loads(out)
                assert result["replay_outcome"] == "complete" and result["replay_detail"] == ""
                # The agent's answer, live on the conversation's stream.
                after = frames[-1]["seq"]
                live = await collect_until(
                    ws, lambda f: f["type"] == FrameType.MESSAGE_COMPLETED and f["seq"] > after, timeout=30)
                assert any(f["type"].startswith("agent.") for f in live), [f["type"] for f in live]
                assert "391" in live[-1]["data"]["content"], live[-1]

            messages = (await http.get(f"{chat.url}/conversations/{cid}/messages", headers=auth("alice"))).json()
            replies = [m for m in messages["items"] if m["role"] == "assistant"
                       and (m["agent_metadata"] or {}).get("in_reply_to") == first]
            agent_replies = [m for m in replies if m["agent_metadata"].get("path") == "agent"]
            assert [m["status"] for m in agent_replies] == ["complete"], replies
            assert "391" in agent_replies[0]["content"]

        code, out, err = await cli(env, "show", oldest_id)
        assert json.loads(out)["replay_outcome"] == "complete"
        # Never twice.
        code, _, err = await cli(env, "replay", oldest_id, "--url", chat.url)
        assert code == 1 and "409" in err and "already replayed" in err
        # Two operators at once: one replays, the other is refused.
        results = await asyncio.gather(*(cli(env, "replay", newest_id, "--url", chat.url) for _ in range(2)))
        assert sorted(code for code, _, _ in results) == [0, 1], results
        refused = next(err for code, _, err in results if code == 1)
        assert "409" in refused
        code, out, _ = await cli(env, "list", "--pending")
        assert code == 0 and out == ""
        # A wrong operator key is refused.
        code, _, err = await cli({**env, "OPERATOR_API_KEY": "wrong"}, "replay", newest_id, "--url", chat.url)
        assert code == 1 and "401" in err
    finally:
        await chat.stop()
        await agent.stop()
