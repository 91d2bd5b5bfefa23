"""A file the agent writes reaches the chat (both services real, SQLite and PostgreSQL): the
ARTIFACT event becomes an ``agent.artifact`` frame on the agent's message, kept in the message's
agent metadata so a page opened later shows it too, and replayed with the frames after a seq."""

from __future__ import annotations

from tests.integration.conversation_service.support import auth, connect
from tests.integration.delegation.stack import agent_service, chat_service, final_of, frames_of, recv_until


async def test_a_file_the_agent_writes_is_an_artifact_frame_and_stays_on_its_message(database_factory, tmp_path):
    async with (
        agent_service(await database_factory("agent"), tmp_path) as agent_url,
        chat_service(await database_factory("chat"), agent_url) as stack,
    ):
        cid = await stack.conversation()
        ws = await connect(stack.chat_url, cid, "alice")
        assert (await stack.send(cid, "/agent what is 17*23")).status_code == 202
        first = await recv_until(ws, lambda f: f["type"] == "agent.complete")
        answer = final_of(first)["data"]["content"]
        assert (await stack.send(cid, "/agent write that to a file called result.md")).status_code == 202
        frames = await recv_until(ws, lambda f: f["type"] == "agent.complete")
        await ws.close()
        messages = (await stack.http.get(f"{stack.chat_url}/conversations/{cid}/messages", headers=auth("alice"))).json()
        before = frames[0]["seq"] - 1
        replay = await connect(stack.chat_url, cid, "alice", after_seq=before)
        replayed = await recv_until(replay, lambda f: f["type"] == "agent.complete")
        await replay.close()

    (artifact,) = frames_of(frames, "agent.artifact")
    created = next(f for f in frames if f["type"] == "message.created" and f["data"]["role"] == "assistant")
    data = artifact["data"]
    assert data["message_id"] == created["data"]["id"]
    assert (data["name"], data["media_type"], data["text"]) == ("result.md", "text/markdown", answer)
    assert "bytes" not in data and "url" not in data and "json" not in data
    types = [f["type"] for f in frames]
    assert types.index("agent.tool_start") < types.index("agent.artifact") < types.index("agent.tool_end")
    assert "result.md" in final_of(frames)["data"]["content"]
    # The message keeps it: a page opened now shows the file on the agent's answer.
    reply = next(m for m in messages["items"] if m["id"] == data["message_id"])
    assert reply["agent_metadata"]["artifacts"] == [{k: v for k, v in data.items() if k != "message_id"}]
    # A client resuming from before the turn gets the same frame again.
    assert frames_of(replayed, "agent.artifact") == [artifact]
