"""``TurnTakeover`` on a real app (SQLite and PostgreSQL): turns left ``running`` by a replica that
died (lease run out) end visibly, each the way its stored frames say. The agent resume and the
kills themselves are in tests/chaos/test_chat_*.py."""

from __future__ import annotations

from datetime import timedelta

from conversation_service.db import migrate
from conversation_service.db.models import (
    Conversation,
    Message,
    MessageStatus,
    Turn,
    TurnKind,
    TurnStatus,
    utcnow,
)
from conversation_service.realtime.frames import Frame
from conversation_service.realtime.repository import FrameRepository
from shared.db import create_engine, create_sessionmaker
from shared.transactions import transaction
from tests.integration.conversation_service.support import collect_until, connect, make_settings, running
from tests.integration.delegation.stack import frames_of

DEAD = {"turn_lease_s": 2.0, "turn_sweep_interval_s": 0.2}


async def _died_mid_turn(database_url: str, *, kind: str | None, reply: tuple[str, str] | None,
                         deltas: list[str]) -> dict[str, str]:
    """What a replica that died mid-turn leaves: the user message, its expired turn, maybe the reply
    row (status, content) and the frames of the reply it had stored."""
    engine = create_engine(database_url)
    await migrate.upgrade(engine)
    try:
        async with transaction(create_sessionmaker(engine)) as session:
            conversation = Conversation(owner_id="alice", org_id="acme", title="t")
            session.add(conversation)
            await session.flush()
            user = Message(conversation_id=conversation.id, role="user", content="hello")
            session.add(user)
            await session.flush()
            ids = {"cid": conversation.id, "user": user.id}
            frames = [Frame("message.created", 1, conversation.id, {"id": user.id, "role": "user"})]
            if reply is not None:
                assistant = Message(conversation_id=conversation.id, role="assistant", status=reply[0],
                                    content=reply[1], agent_metadata={"path": "direct_llm", "in_reply_to": user.id})
                session.add(assistant)
                await session.flush()
                ids["reply"] = assistant.id
                frames.append(Frame("message.created", 2, conversation.id, {"id": assistant.id, "role": "assistant"}))
                frames += [Frame("message.delta", 3 + i, conversation.id, {"message_id": assistant.id, "text": text})
                           for i, text in enumerate(deltas)]
            session.add(Turn(id=user.id, conversation_id=conversation.id, kind=kind, status=TurnStatus.RUNNING.value,
                             owner_id="replica-dead", lease_expires_at=utcnow() - timedelta(seconds=1),
                             assistant_message_id=ids.get("reply")))
            await FrameRepository(session).insert_many(frames)
            conversation.seq_reserved = 100  # the dead replica's block: seqs it may have shown live
        return ids
    finally:
        await engine.dispose()


async def _turn_and_message(app, turn_id: str, message_id: str) -> tuple[Turn, Message]:
    async with transaction(app.state.storage.sessionmaker) as session:
        return await session.get(Turn, turn_id), await session.get(Message, message_id)


async def test_a_direct_reply_cut_by_a_crash_ends_as_an_error_with_the_text_shown(database_url: str) -> None:
    ids = await _died_mid_turn(database_url, kind=TurnKind.DIRECT.value,
                               reply=(MessageStatus.STREAMING.value, ""), deltas=["Hel", "lo"])
    async with running(make_settings(database_url, **DEAD)) as (base, app):
        ws = await connect(base, ids["cid"], "alice", after_seq=0)
        frames = await collect_until(ws, lambda f: f["type"] == "message.error")
        await ws.close()
        turn, message = await _turn_and_message(app, ids["user"], ids["reply"])

    error = frames[-1]
    assert error["seq"] > 100  # above the dead replica's reservation: no seq it may have shown
    assert error["data"] == {"message_id": ids["reply"], "code": "reply_interrupted", "content": "Hello",
                             "retryable": True, "text": error["data"]["text"]} and error["data"]["text"]
    assert (message.status, message.content) == (MessageStatus.ERROR.value, "Hello")
    assert turn.status == TurnStatus.DONE.value and turn.takeovers == 1


async def test_a_reply_that_had_ended_gets_its_missing_end_frame(database_url: str) -> None:
    ids = await _died_mid_turn(database_url, kind=TurnKind.DIRECT.value,
                               reply=(MessageStatus.COMPLETE.value, "Hi there"), deltas=["Hi", " there"])
    async with running(make_settings(database_url, **DEAD)) as (base, app):
        ws = await connect(base, ids["cid"], "alice", after_seq=0)
        frames = await collect_until(ws, lambda f: f["type"] == "message.completed")
        await ws.close()
        turn, message = await _turn_and_message(app, ids["user"], ids["reply"])

    assert frames[-1]["data"] == {"message_id": ids["reply"], "content": "Hi there", "status": "complete"}
    assert message.status == MessageStatus.COMPLETE.value and turn.status == TurnStatus.DONE.value


async def test_a_message_that_got_no_reply_frame_is_answered_afresh(database_url: str) -> None:
    ids = await _died_mid_turn(database_url, kind=None, reply=None, deltas=[])
    async with running(make_settings(database_url, **DEAD)) as (base, app):
        ws = await connect(base, ids["cid"], "alice", after_seq=0)
        frames = await collect_until(ws, lambda f: f["type"] == "message.completed")
        await ws.close()
        await app.state.tasks.join()
        async with transaction(app.state.storage.sessionmaker) as session:
            turn = await session.get(Turn, ids["user"])

    created = [f for f in frames_of(frames, "message.created") if f["data"]["role"] == "assistant"]
    assert len(created) == 1 and created[0]["data"]["agent_metadata"]["in_reply_to"] == ids["user"]
    assert frames[-1]["data"]["message_id"] == created[0]["data"]["id"] and frames[-1]["data"]["content"]
    assert turn.status == TurnStatus.DONE.value and turn.assistant_message_id == created[0]["data"]["id"]
