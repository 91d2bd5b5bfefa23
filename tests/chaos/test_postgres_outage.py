"""PostgreSQL restarted, or stopped for 5 s, while an agent reply streams: nothing durable is lost.

Both services run as real processes on a PostgreSQL cluster of the test's own (``initdb`` in a
temporary folder, its own port), the agent's model is the fake OpenAI-compatible server (150 words,
one every 50 ms). Two chat clients follow the conversation; once the reply streams, the second goes
away, the database is restarted (or stopped for 5 s and started again), and the second comes back with
``after_seq``. Then (DESIGN §8, "a durable write is never skipped"):

- the reply completes on both clients, with the model's whole answer, each frame once and no gap;
- the chat stored exactly that answer, and a client replaying the conversation from the start gets
  every frame the live client saw, the same frame under each seq;
- the Agent Service's durable log, replayed with ``Last-Event-ID: 0``, holds every event with no hole
  and a COMPLETE whose answer is the text of its ANSWER_CHUNKs.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.chaos.chat_support import (
    AGENT_KEY,
    ChatClient,
    agent_process,
    agent_session_of,
    assert_once_in_order,
    assert_seqs_are_forever,
    chat_process,
    headers,
    is_end_of,
    new_conversation,
    record,
    replay_agent_log,
    reply_id,
    send,
    shown_text,
    stored_messages,
)
from tests.chaos.conftest import ANSWER
from tests.support.dependencies import PrivatePostgres

OUTAGE_S = 5.0


@pytest.mark.timeout(150)
@pytest.mark.parametrize("fault", ["restart", "stop_5s"])
async def test_an_agent_reply_survives_a_database_outage_whole(
    tmp_path: Path, postgres: PrivatePostgres, long_answers: dict[str, str], fault: str,
) -> None:
    agent = agent_process(await postgres.create_database("agent"), tmp_path, **long_answers)
    await agent.start(tmp_path)
    chat = chat_process(await postgres.create_database("chat"), agent.url, MIGRATE_ON_START="true", **long_answers)
    await chat.start(tmp_path)
    try:
        figures = await _reply_through(fault, postgres, agent.url, chat.url)
    finally:
        await chat.stop()
        await agent.stop()
    record(tmp_path, f"postgres_outage_{fault}", figures)


async def _reply_through(fault: str, postgres: PrivatePostgres, agent_url: str, chat_url: str) -> dict:
    cid = await new_conversation(chat_url)
    watcher, leaver = ChatClient(cid), ChatClient(cid)
    await watcher.connect(chat_url)
    await leaver.connect(chat_url)
    user_id = (await send(chat_url, cid, "/agent tell me a long story"))["message_id"]
    await watcher.wait_for(lambda f: f["type"] == "message.delta"
                           and f["data"]["message_id"] == reply_id(watcher.frames, user_id), 30)
    await leaver.close()
    started = time.monotonic()
    if fault == "restart":
        away_s = await postgres.restart()
    else:
        await postgres.stop()
        await _requests_meanwhile_answer_503(chat_url, agent_url, cid)
        await asyncio.sleep(max(OUTAGE_S - (time.monotonic() - started), 0))  # the fault: the database away 5 s
        await postgres.start()
        away_s = time.monotonic() - started
    await leaver.connect(chat_url, resume=True)
    reply = reply_id(watcher.frames, user_id)
    ends = [await client.wait_for(lambda f: is_end_of(f, reply), 60) for client in (watcher, leaver)]
    ended_s = time.monotonic() - started
    await watcher.close()
    await leaver.close()

    answer = ANSWER
    for name, client, end in (("watcher", watcher, ends[0]), ("leaver", leaver, ends[1])):
        assert end["type"] == "message.completed", (name, end)
        assert end["data"]["content"] == answer, name
        assert_once_in_order(client.frames)
        seqs = [f["seq"] for f in client.frames]
        assert seqs == list(range(seqs[0], seqs[-1] + 1)), f"a gap in the {name}'s frames: {seqs}"
        assert shown_text(client.frames, reply) == answer, name
    stored = {m["id"]: m for m in await stored_messages(chat_url, cid)}[reply]
    assert (stored["status"], stored["content"]) == ("complete", answer)
    replay = ChatClient(cid)
    await replay.connect(chat_url, resume=True)  # after_seq=0: the whole conversation
    await replay.wait_for(lambda f: f["seq"] >= watcher.last_seq, 15)
    await replay.close()
    assert_seqs_are_forever(watcher.frames, leaver.frames, replay.frames)

    events = await replay_agent_log(agent_url, await agent_session_of(chat_url, cid), AGENT_KEY)
    seqs = [e.seq for e in events]
    assert seqs == list(range(1, len(seqs) + 1)), f"a hole in the agent's log: {seqs}"
    assert events[-1].type.value == "COMPLETE", events[-1]
    chunks = "".join(e.data["text"] for e in events if e.type.value == "ANSWER_CHUNK")
    assert chunks == events[-1].data["answer"] == answer
    return {"fault": fault, "database_away_s": round(away_s, 2), "fault_to_both_clients_ended_s": round(ended_s, 2),
            "agent_events": len(events), "frames": len(watcher.frames)}


async def _requests_meanwhile_answer_503(chat_url: str, agent_url: str, cid: str) -> None:
    """Requests that need the database while it is away are refused at once, saying when to retry:
    never a 500, never a stall."""
    async with httpx.AsyncClient(timeout=10) as http:
        chat = await http.post(f"{chat_url}/conversations", json={"title": "during"}, headers=headers())
        agent = await http.get(f"{agent_url}/api/v1/agent/sessions/{uuid.uuid4().hex}",
                               headers={"X-API-Key": AGENT_KEY})
    for answer in (chat, agent):
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"] == "storage_unavailable" and int(answer.headers["Retry-After"]) > 0
