"""``TurnTakeover`` on a real app (SQLite and PostgreSQL): turns left ``running`` by a replica that
died (lease run out) end visibly, each the way its stored frames say. The agent resume and the
kills themselves are in tests/chaos/test_chat_*.py."""

from __future__ import annotations

from conversation_service.db.models import MessageStatus, TurnKind, TurnStatus
from tests.integration.conversation_service.support import died_mid_turn, taking_over, turn_and_reply
from tests.integration.delegation.stack import frames_of


async def test_a_direct_reply_cut_by_a_crash_ends_as_an_error_with_the_text_shown(database_url: str) -> None:
    ids = await died_mid_turn(database_url, kind=TurnKind.DIRECT.value,
                              reply=(MessageStatus.STREAMING.value, ""), deltas=["Hel", "lo"])
    async with taking_over(database_url, ids, lambda f: f["type"] == "message.error") as (app, frames):
        turn, message = await turn_and_reply(app, ids)

    error = frames[-1]
    assert error["seq"] > 100  # above the dead replica's reservation: no seq it may have shown
    assert error["data"] == {"message_id": ids["reply"], "code": "reply_interrupted", "content": "Hello",
                             "retryable": True, "text": error["data"]["text"]} and error["data"]["text"]
    assert (message.status, message.content) == (MessageStatus.ERROR.value, "Hello")
    assert turn.status == TurnStatus.DONE.value and turn.takeovers == 1


async def test_a_reply_that_had_ended_gets_its_missing_end_frame(database_url: str) -> None:
    ids = await died_mid_turn(database_url, kind=TurnKind.DIRECT.value,
                              reply=(MessageStatus.COMPLETE.value, "Hi there"), deltas=["Hi", " there"])
    async with taking_over(database_url, ids, lambda f: f["type"] == "message.completed") as (app, frames):
        turn, message = await turn_and_reply(app, ids)

    assert frames[-1]["data"] == {"message_id": ids["reply"], "content": "Hi there", "status": "complete"}
    assert message.status == MessageStatus.COMPLETE.value and turn.status == TurnStatus.DONE.value


async def test_a_message_that_got_no_reply_frame_is_answered_afresh(database_url: str) -> None:
    ids = await died_mid_turn(database_url, kind=None, reply=None, deltas=[])
    async with taking_over(database_url, ids, lambda f: f["type"] == "message.completed") as (app, frames):
        await app.state.tasks.join()
        turn, _ = await turn_and_reply(app, ids)

    created = [f for f in frames_of(frames, "message.created") if f["data"]["role"] == "assistant"]
    assert len(created) == 1 and created[0]["data"]["agent_metadata"]["in_reply_to"] == ids["user"]
    assert frames[-1]["data"]["message_id"] == created[0]["data"]["id"] and frames[-1]["data"]["content"]
    assert turn.status == TurnStatus.DONE.value and turn.assistant_message_id == created[0]["data"]["id"]
