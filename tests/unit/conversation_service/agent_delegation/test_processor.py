"""``AgentEventProcessor`` fed simulated agent event streams.

Real pieces around it: a migrated database (SQLite and PostgreSQL), the group-commit
``FrameWriter``, a ``FramePublisher`` on an ``InProcessHub``; the test subscribes to the hub to see
exactly the frames a WebSocket client would get.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, func, select

from conversation_service.agent_client import AgentStreamError
from conversation_service.agent_delegation.processor import (
    RESULT_PREVIEW_CHARS,
    AgentEventProcessor,
    AgentTurn,
    TurnOutcomeKind,
)
from conversation_service.db import migrate
from conversation_service.db.models import (
    AgentSessionStatus,
    Conversation,
    ConversationAgentSession,
    ConversationFrame,
    InteractionStatus,
    Message,
    MessageStatus,
    PendingInteraction,
)
from conversation_service.metrics import ConversationMetrics, agent_events_in_hand
from conversation_service.realtime.frames import Frame, FrameType, MessageCreated
from conversation_service.realtime.hub import InProcessHub
from conversation_service.realtime.publisher import FramePublisher
from conversation_service.realtime.repository import FrameRepository
from conversation_service.realtime.reservations import SeqReservations
from conversation_service.realtime.seq import InProcessSeqAllocator
from conversation_service.realtime.writer import FrameWriter
from conversation_service.replies.ender import ReplyEnder
from conversation_service.replies.policy import AGENT_ERROR_TEXT as USER_ERROR_TEXT
from conversation_service.replies.policy import DEFAULT_AGENT_ERROR_TEXT as DEFAULT_USER_ERROR
from shared.db import create_engine, create_sessionmaker
from shared.protocol import EventEnvelope, EventType, utcnow
from shared.transactions import Transactions, transaction

AGENT_SESSION_ID = "agent-sess-1"
ASK_USER_TIMEOUT_S = 300.0


class FrameLog:
    """A hub subscriber that records what a client of the conversation would receive."""

    def __init__(self) -> None:
        self.frames: list[Frame] = []
        # The agent events' arrival stamps in effect when each frame was delivered (by frame seq).
        self.stamps: dict[int, tuple[float, ...] | None] = {}
        self._waiters: list[tuple[Any, asyncio.Event]] = []

    def deliver(self, frame: Frame) -> None:
        self.frames.append(frame)
        self.stamps[frame.seq] = agent_events_in_hand()
        for predicate, ready in self._waiters:
            if predicate(self.frames):
                ready.set()

    async def wait_for(self, predicate, timeout: float = 10.0) -> None:
        ready = asyncio.Event()
        if predicate(self.frames):
            return
        self._waiters.append((predicate, ready))
        await asyncio.wait_for(ready.wait(), timeout)

    def of(self, type_: str) -> list[Frame]:
        return [f for f in self.frames if f.type == type_]

    @property
    def types(self) -> list[str]:
        return [f.type for f in self.frames]


class StatementLog:
    """Every SQL statement the engine sends, recorded by a ``before_cursor_execute`` listener."""

    def __init__(self, engine) -> None:
        self.statements: list[str] = []
        self._engine = engine.sync_engine
        event.listen(self._engine, "before_cursor_execute", self._record)

    def _record(self, conn, cursor, statement, parameters, context, executemany) -> None:
        self.statements.append(" ".join(statement.split()).upper())

    def close(self) -> None:
        event.remove(self._engine, "before_cursor_execute", self._record)

    def since(self, mark: int) -> list[str]:
        return self.statements[mark:]


@dataclass
class Bed:
    engine: Any
    sessionmaker: Any
    writer: FrameWriter
    hub: InProcessHub
    seq: InProcessSeqAllocator
    publisher: FramePublisher
    metrics: ConversationMetrics
    log: FrameLog
    conversation_id: str
    session_row_id: str
    message_id: str
    conversation: Conversation
    agent_session_id: str = AGENT_SESSION_ID

    def processor(self, queue_size: int = 64) -> AgentEventProcessor:
        return _processor(self, self.publisher, queue_size)

    def turn(self) -> AgentTurn:
        return AgentTurn(
            conversation=self.conversation, session_row_id=self.session_row_id,
            agent_session_id=self.agent_session_id, message_id=self.message_id, in_reply_to="user-msg-1",
            metadata={"route_reason": "explicit_command"},
        )

    async def message(self) -> Message:
        async with transaction(self.sessionmaker) as session:
            return await session.get(Message, self.message_id)

    async def session_row(self) -> ConversationAgentSession:
        async with transaction(self.sessionmaker) as session:
            return await session.get(ConversationAgentSession, self.session_row_id)

    async def agent_status(self) -> str | None:
        async with transaction(self.sessionmaker) as session:
            return (await session.get(Conversation, self.conversation_id)).agent_status


@asynccontextmanager
async def _make_bed(database_url: str, *, flush_interval: float,
                    agent_session_id: str = AGENT_SESSION_ID, seq_block: int = 100) -> AsyncIterator[Bed]:
    engine = create_engine(database_url)
    await migrate.upgrade(engine)
    sessionmaker = create_sessionmaker(engine)
    metrics = ConversationMetrics()
    writer = FrameWriter(sessionmaker, interval=flush_interval, max_batch=10_000, queue_size=100_000,
                         metrics=metrics.frames)

    async def floor(conversation_id: str) -> int:
        async with transaction(sessionmaker) as session:
            persisted = await FrameRepository(session).max_seq(conversation_id)
        return max(persisted, writer.pending_max(conversation_id))

    hub = InProcessHub()
    await hub.start()
    writer.start()
    seq = InProcessSeqAllocator(floor, SeqReservations(Transactions(sessionmaker, budget_s=5)), block=seq_block)
    publisher = FramePublisher(seq, writer, hub, metrics.frames)
    async with transaction(sessionmaker) as session:
        conversation = Conversation(owner_id="alice", org_id="acme", title="t", agent_status="thinking")
        session.add(conversation)
        await session.flush()
        row = ConversationAgentSession(conversation_id=conversation.id, agent_session_id=agent_session_id,
                                       status=AgentSessionStatus.ACTIVE.value)
        message = Message(conversation_id=conversation.id, role="assistant", content="",
                          status=MessageStatus.STREAMING.value, agent_session_id=agent_session_id,
                          agent_metadata={"path": "agent"})
        session.add_all([row, message])
        await session.flush()
        ids = conversation.id, row.id, message.id
    log = FrameLog()
    hub.subscribe(ids[0], log)
    # What the delegation does before handing the stream over: the assistant message is announced
    # (this also loads the seq floor, so the processor's own frames start from a warm allocator).
    await publisher.emit(ids[0], MessageCreated({"id": ids[2], "role": "assistant"}))
    try:
        yield Bed(engine, sessionmaker, writer, hub, seq, publisher, metrics, log, *ids, conversation, agent_session_id)
    finally:
        await writer.close()
        await hub.close()
        await engine.dispose()


@pytest.fixture
async def bed(database_url: str) -> AsyncIterator[Bed]:
    async with _make_bed(database_url, flush_interval=0.05) as b:
        yield b


def envelope(seq: int, type_: EventType, data: dict[str, Any]) -> EventEnvelope:
    return EventEnvelope(session_id=AGENT_SESSION_ID, run_id="run-1", seq=seq, type=type_, ts=utcnow(), data=data)


def numbered(events: Iterable[tuple[EventType, dict[str, Any]]]) -> list[EventEnvelope]:
    return [envelope(seq, type_, data) for seq, (type_, data) in enumerate(events, start=1)]


async def stream_of(events: Iterable[EventEnvelope], *, then_raise: BaseException | None = None):
    for item in events:
        await asyncio.sleep(0)  # a network read: the reader yields to the loop between events
        yield item
    if then_raise is not None:
        raise then_raise


def chunk(text: str) -> tuple[EventType, dict[str, Any]]:
    return EventType.ANSWER_CHUNK, {"text": text}


TOOL_RUN = [
    (EventType.THOUGHT, {"text": "I should use the calculator.", "step": 1}),
    (EventType.TOOL_START, {"call_id": "c1", "tool": "calculator", "args": {"expression": "17*23"}}),
    (EventType.TOOL_END, {"call_id": "c1", "tool": "calculator", "ok": True, "result": "391", "duration_ms": 1.234}),
    (EventType.TOOL_START, {"call_id": "c2", "tool": "knowledge_search", "args": {"query": "x"}}),
    (EventType.TOOL_END, {"call_id": "c2", "ok": False, "error": "index unavailable", "duration_ms": 5.0}),
    chunk("17*23 "),
    chunk("is "),
    chunk("391."),
    (EventType.COMPLETE, {"answer": "17*23 is 391.",
                          "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
                                    "llm_calls": 2, "tool_calls": 2}}),
]


async def test_each_event_type_maps_to_its_frame(bed: Bed) -> None:
    outcome = await bed.processor().process(bed.turn(), stream_of(numbered(TOOL_RUN)))

    assert outcome.kind is TurnOutcomeKind.COMPLETE
    assert outcome.content == "17*23 is 391." and outcome.last_seq == len(TOOL_RUN)
    frames = bed.log.frames[1:]  # after message.created
    deltas = [f for f in frames if f.type == FrameType.MESSAGE_DELTA]
    # Chunks that were queued together may go out as one delta: the text is what counts.
    assert 1 <= len(deltas) <= 3
    assert [f.type for f in frames] == [
        FrameType.AGENT_THINKING,
        FrameType.AGENT_TOOL_START, FrameType.AGENT_TOOL_END,
        FrameType.AGENT_TOOL_START, FrameType.AGENT_TOOL_END,
        *[FrameType.MESSAGE_DELTA] * len(deltas),
        FrameType.MESSAGE_COMPLETED, FrameType.AGENT_COMPLETE,
    ]
    mid = bed.message_id
    assert all(f.conversation_id == bed.conversation_id for f in frames)
    assert [f.seq for f in frames] == list(range(2, 2 + len(frames)))
    assert frames[0].data == {"message_id": mid, "text": "I should use the calculator.", "step": 1}
    assert frames[1].data == {"message_id": mid, "call_id": "c1", "tool": "calculator",
                              "args": {"expression": "17*23"}}
    assert frames[2].data == {"message_id": mid, "call_id": "c1", "tool": "calculator", "ok": True,
                              "duration_ms": 1.234, "error": None, "result_preview": "391"}
    # TOOL_END without a tool name: the name known from TOOL_START is reported.
    assert frames[4].data == {"message_id": mid, "call_id": "c2", "tool": "knowledge_search", "ok": False,
                              "duration_ms": 5.0, "error": "index unavailable", "result_preview": None}
    assert all(d.data["message_id"] == mid for d in deltas)
    assert "".join(d.data["text"] for d in deltas) == "17*23 is 391."
    completed, complete = frames[-2], frames[-1]
    assert completed.data == {"message_id": mid, "content": "17*23 is 391.", "status": "complete"}
    assert complete.data["message_id"] == mid and complete.data["agent_session_id"] == AGENT_SESSION_ID
    assert complete.data["usage"]["total_tokens"] == 15 and complete.data["usage"]["tool_calls"] == 2

    message = await bed.message()
    assert message.status == MessageStatus.COMPLETE.value and message.content == "17*23 is 391."
    meta = message.agent_metadata
    assert meta["path"] == "agent" and meta["route_reason"] == "explicit_command"
    assert meta["in_reply_to"] == "user-msg-1" and meta["agent_session_id"] == AGENT_SESSION_ID
    assert meta["last_event_seq"] == len(TOOL_RUN) and meta["usage"]["total_tokens"] == 15
    assert meta["tools"] == {
        "c1": {"tool": "calculator", "args": {"expression": "17*23"}, "status": "ok", "duration_ms": 1.23,
               "error": None, "result_preview": "391"},
        "c2": {"tool": "knowledge_search", "args": {"query": "x"}, "status": "error", "duration_ms": 5.0,
               "error": "index unavailable", "result_preview": None},
    }
    row = await bed.session_row()
    assert row.status == AgentSessionStatus.ACTIVE.value  # the session stays open for the next turn
    assert row.last_event_seq == len(TOOL_RUN)
    assert await bed.agent_status() is None

    # Every frame is persisted for replay (the terminal frame is a boundary: committed at once).
    await bed.writer.flush()
    async with transaction(bed.sessionmaker) as session:
        persisted = await FrameRepository(session).list_after(bed.conversation_id, 0, limit=100)
    assert [(f.seq, f.type, f.data) for f in persisted] == [(f.seq, f.type, f.data) for f in bed.log.frames]


async def test_long_tool_results_are_previewed(bed: Bed) -> None:
    result = "x" * (RESULT_PREVIEW_CHARS * 3)
    events = numbered([
        (EventType.TOOL_START, {"call_id": "c1", "tool": "knowledge_search", "args": {}}),
        (EventType.TOOL_END, {"call_id": "c1", "ok": True, "result": result, "duration_ms": 2}),
        chunk("done"),
        (EventType.COMPLETE, {"answer": "done"}),
    ])
    await bed.processor().process(bed.turn(), stream_of(events))
    preview = bed.log.of(FrameType.AGENT_TOOL_END)[0].data["result_preview"]
    assert len(preview) == RESULT_PREVIEW_CHARS and preview.endswith("…")
    assert (await bed.message()).agent_metadata["tools"]["c1"]["result_preview"] == preview


async def test_tool_status_is_in_the_message_metadata_while_the_run_goes_on(bed: Bed) -> None:
    """A client loading the conversation mid-run sees which tools ran (TOOL_END is a boundary)."""
    gate = asyncio.Event()

    async def events():
        yield envelope(1, EventType.TOOL_START, {"call_id": "c1", "tool": "calculator", "args": {"e": "1+1"}})
        yield envelope(2, EventType.TOOL_END, {"call_id": "c1", "ok": True, "result": 2, "duration_ms": 1})
        await gate.wait()
        yield envelope(3, EventType.COMPLETE, {"answer": "2"})

    run = asyncio.create_task(bed.processor().process(bed.turn(), events()))
    await bed.log.wait_for(lambda frames: any(f.type == FrameType.AGENT_TOOL_END for f in frames))
    # The metadata write follows the tool_end frame inside the same handler: wait for it by
    # polling the database state itself, bounded.
    async with asyncio.timeout(10):
        while "c1" not in ((await bed.message()).agent_metadata or {}).get("tools", {}):
            await asyncio.sleep(0.01)
    message = await bed.message()
    assert message.status == MessageStatus.STREAMING.value
    assert message.agent_metadata["tools"]["c1"]["status"] == "ok"
    gate.set()
    outcome = await run
    assert outcome.kind is TurnOutcomeKind.COMPLETE


async def test_answer_chunks_cause_no_database_statement(database_url: str) -> None:
    # A group-commit window longer than the test: frames reach the database only at event
    # boundaries, so any statement seen while chunks flow would come from the processor itself.
    async with _make_bed(database_url, flush_interval=30.0) as bed:
        await bed.writer.flush()
        statements = StatementLog(bed.engine)
        try:
            n_chunks = 300
            gate = asyncio.Event()

            async def events():
                for seq in range(1, n_chunks + 1):
                    await asyncio.sleep(0)
                    yield envelope(seq, EventType.ANSWER_CHUNK, {"text": f"t{seq} "})
                await gate.wait()
                yield envelope(n_chunks + 1, EventType.COMPLETE,
                               {"answer": "".join(f"t{s} " for s in range(1, n_chunks + 1))})

            run = asyncio.create_task(bed.processor().process(bed.turn(), events()))
            expected_text = "".join(f"t{s} " for s in range(1, n_chunks + 1))
            await bed.log.wait_for(lambda frames: "".join(
                f.data["text"] for f in frames if f.type == FrameType.MESSAGE_DELTA) == expected_text)
            during_chunks = list(statements.statements)
            gate.set()
            outcome = await run
            await bed.writer.flush()
            after = statements.statements
        finally:
            statements.close()

    # Frame seqs are reserved durably a block at a time (realtime.seq): one small write per block
    # of 100 seqs, never one per chunk, and nothing else.
    reservations = [s for s in during_chunks if s.startswith("UPDATE CONVERSATIONS SET SEQ_RESERVED")]
    assert [s for s in during_chunks if s not in reservations] == []
    assert len(reservations) <= n_chunks // 100 + 1
    assert outcome.kind is TurnOutcomeKind.COMPLETE
    message_updates = [s for s in after if s.startswith("UPDATE MESSAGES")]
    # The final message is written once, content and metadata together.
    assert len(message_updates) == 1 and "CONTENT" in message_updates[0] and "AGENT_METADATA" in message_updates[0]
    # Frames are group-committed: a handful of batch inserts for 300 deltas, not one per delta.
    frame_inserts = [s for s in after if s.startswith("INSERT INTO CONVERSATION_FRAMES")]
    assert 1 <= len(frame_inserts) <= 3, len(frame_inserts)


async def test_ask_user_creates_the_pending_question_and_pauses(bed: Bed) -> None:
    far_future = utcnow() + timedelta(days=2)
    before = utcnow()
    events = numbered([
        (EventType.THOUGHT, {"text": "I need the city."}),
        chunk("Let me check. "),
        (EventType.ASK_USER, {"question_id": "q-42", "question": "Which city do you mean?",
                              "expires_at": far_future.isoformat()}),
    ])
    outcome = await bed.processor().process(bed.turn(), stream_of(events))

    assert outcome.kind is TurnOutcomeKind.ASK_USER and outcome.question_id == "q-42"
    assert outcome.content == "Let me check. \n\nWhich city do you mean?"
    assert bed.log.types[-2:] == [FrameType.MESSAGE_COMPLETED, FrameType.AGENT_ASK_USER]
    completed, asked = bed.log.frames[-2:]
    assert completed.data == {"message_id": bed.message_id, "content": outcome.content, "status": "complete"}
    assert asked.data["question_id"] == "q-42" and asked.data["question"] == "Which city do you mean?"
    assert asked.data["kind"] == "question" and asked.data["message_id"] == bed.message_id

    async with transaction(bed.sessionmaker) as session:
        question = await session.get(PendingInteraction, "q-42")
        count = await session.scalar(select(func.count()).select_from(PendingInteraction))
    assert count == 1
    assert question.status == InteractionStatus.PENDING.value
    assert question.conversation_id == bed.conversation_id and question.agent_session_row_id == bed.session_row_id
    assert question.agent_session_id == AGENT_SESSION_ID and question.question == "Which city do you mean?"
    # The agent's own deadline is capped by this service's ASK_USER timeout (5 minutes).
    assert before + timedelta(seconds=ASK_USER_TIMEOUT_S) <= question.expires_at
    assert question.expires_at <= utcnow() + timedelta(seconds=ASK_USER_TIMEOUT_S)
    assert asked.data["expires_at"] == question.expires_at.isoformat()

    row = await bed.session_row()
    assert row.status == AgentSessionStatus.AWAITING_USER.value
    assert row.pending_question_id == "q-42" and row.last_event_seq == 3
    assert await bed.agent_status() == AgentSessionStatus.AWAITING_USER.value
    message = await bed.message()
    assert message.status == MessageStatus.COMPLETE.value and message.content == outcome.content
    assert message.agent_metadata["ask_user"]["question_id"] == "q-42"


async def test_a_replayed_ask_user_does_not_create_the_question_twice(bed: Bed) -> None:
    ask = (EventType.ASK_USER, {"question_id": "q-1", "question": "Which?",
                                "expires_at": (utcnow() + timedelta(minutes=1)).isoformat()})
    await bed.processor().process(bed.turn(), stream_of(numbered([ask])))
    outcome = await bed.processor().process(bed.turn(), stream_of(numbered([ask])))
    assert outcome.kind is TurnOutcomeKind.ASK_USER
    async with transaction(bed.sessionmaker) as session:
        assert await session.scalar(select(func.count()).select_from(PendingInteraction)) == 1


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("LLM_UNAVAILABLE", USER_ERROR_TEXT["LLM_UNAVAILABLE"]),
        ("MAX_STEPS_EXCEEDED", USER_ERROR_TEXT["MAX_STEPS_EXCEEDED"]),
        ("INTERNAL", DEFAULT_USER_ERROR),
        ("SOMETHING_NEW", DEFAULT_USER_ERROR),
    ],
)
async def test_agent_error_shows_a_user_friendly_text(bed: Bed, code: str, expected: str) -> None:
    raw = "upstream 502 from http://10.0.0.7:8080/v1/chat/completions: Traceback (most recent call last)"
    events = numbered([chunk("Partial "), chunk("answer"),
                       (EventType.ERROR, {"code": code, "message": raw, "retryable": True})])
    outcome = await bed.processor().process(bed.turn(), stream_of(events))

    assert outcome.kind is TurnOutcomeKind.AGENT_ERROR and outcome.error_code == code
    assert bed.log.types[-2:] == [FrameType.MESSAGE_ERROR, FrameType.AGENT_ERROR]
    message_error, agent_error = bed.log.frames[-2:]
    assert message_error.data == {"message_id": bed.message_id, "code": code, "text": expected,
                                  "content": "Partial answer", "retryable": True}
    assert agent_error.data == {"message_id": bed.message_id, "code": code, "message": expected, "retryable": True}
    assert all(raw not in str(f.data) and "Traceback" not in str(f.data) for f in bed.log.frames)

    message = await bed.message()
    assert message.status == MessageStatus.ERROR.value and message.content == "Partial answer"
    assert message.agent_metadata["error"] == {"code": code}
    assert (await bed.session_row()).status == AgentSessionStatus.FAILED.value
    assert await bed.agent_status() is None


async def test_a_cancelled_run_ends_the_reply_stopped_not_failed(bed: Bed) -> None:
    """The user's stop cancels the run: its ERROR CANCELLED ends the message ``stopped`` with the
    text so far, for every client, and no error reaches the page."""
    events = numbered([chunk("Partial "), chunk("answer"),
                       (EventType.ERROR, {"code": "CANCELLED", "message": "the run was cancelled", "retryable": False})])
    outcome = await bed.processor().process(bed.turn(), stream_of(events))

    assert outcome.kind is TurnOutcomeKind.STOPPED and outcome.content == "Partial answer"
    assert bed.log.types[-1] == FrameType.MESSAGE_COMPLETED
    assert bed.log.frames[-1].data == {"message_id": bed.message_id, "content": "Partial answer", "status": "stopped"}
    assert not bed.log.of(FrameType.MESSAGE_ERROR) and not bed.log.of(FrameType.AGENT_ERROR)
    message = await bed.message()
    assert message.status == MessageStatus.STOPPED.value and message.content == "Partial answer"
    assert message.agent_metadata["stopped"] is True
    assert (await bed.session_row()).status == AgentSessionStatus.COMPLETED.value
    assert await bed.agent_status() is None


async def test_waiting_shows_a_countdown_and_rate_limited_says_when_to_retry(bed: Bed) -> None:
    waiting = {"reason": "rate limit of 2 requests per 60 s reached", "wait_s": 12.5, "limit": "requests"}
    events = numbered([(EventType.WAITING, waiting),
                       (EventType.ERROR, {"code": "RATE_LIMITED", "message": "x", "retryable": True,
                                          "retry_after_s": 41.2})])
    outcome = await bed.processor().process(bed.turn(), stream_of(events))

    assert outcome.error_code == "RATE_LIMITED"
    assert bed.log.types[1:] == [FrameType.AGENT_WAITING, FrameType.MESSAGE_ERROR, FrameType.AGENT_ERROR]
    frame = bed.log.frames[1].data
    assert {k: frame[k] for k in ("message_id", "reason", "wait_s", "limit")} == {"message_id": bed.message_id, **waiting}
    assert frame["until"] == (events[0].ts + timedelta(seconds=12.5)).isoformat()
    assert bed.log.frames[-1].data["message"] == (
        "Your organisation has reached its usage limit for the agent. Please try again in 42 s."
    )


async def test_a_hole_before_a_crashed_runs_error_is_accepted(bed: Bed) -> None:
    """The Agent Service crashed mid-run: the events it had shown but not written are gone, and its
    recovery's ERROR comes after every seq the run had reserved (seq 1001, not 3)."""
    interrupted = {"code": "INTERRUPTED", "message": "the service stopped while the run was executing",
                   "retryable": True}
    events = [*numbered([chunk("Partial "), chunk("answer")]), envelope(1001, EventType.ERROR, interrupted)]
    outcome = await bed.processor().process(bed.turn(), stream_of(events))

    assert outcome.kind is TurnOutcomeKind.AGENT_ERROR and outcome.error_code == "INTERRUPTED"
    assert outcome.last_seq == 1001
    assert bed.log.types[-2:] == [FrameType.MESSAGE_ERROR, FrameType.AGENT_ERROR]
    message = await bed.message()
    assert message.status == MessageStatus.ERROR.value and message.content == "Partial answer"
    assert (await bed.session_row()).status == AgentSessionStatus.FAILED.value


async def test_a_run_resumed_after_a_crash_is_the_same_reply_with_the_cut_step_s_text_replaced(bed: Bed) -> None:
    """The Agent Service died while the model wrote "The ans" after a tool step; another process went
    on from the end of that step (RUN_RESUMED above the dead run's reservation). The reply is the same
    message: its text is cut where the run's answer stands (an empty delta at that offset), the user
    is told on the message, the step's new text follows, and the message ends with each passage once."""
    events = [
        *numbered([chunk("Let me check. "), (EventType.TOOL_START, {"call_id": "c1", "tool": "calculator", "args": {}}),
                   (EventType.TOOL_END, {"call_id": "c1", "ok": True, "result": "42", "duration_ms": 1.0}),
                   chunk("The ans")]),
        envelope(1001, EventType.RUN_RESUMED, {"checkpoint_seq": 3, "answer_chars": 14, "continuation": 1, "step": 1}),
        envelope(1002, EventType.ANSWER_CHUNK, {"text": "The answer is 42."}),
        envelope(1003, EventType.COMPLETE, {"answer": "Let me check. The answer is 42."}),
    ]
    outcome = await bed.processor(queue_size=1).process(bed.turn(), stream_of(events))

    assert outcome.kind is TurnOutcomeKind.COMPLETE and outcome.content == "Let me check. The answer is 42."
    deltas = bed.log.of(FrameType.MESSAGE_DELTA)
    assert [(d.data["text"], d.data["offset"]) for d in deltas] == [
        ("Let me check. ", 0), ("The ans", 14), ("", 14), ("The answer is 42.", 14)]
    [notice] = bed.log.of(FrameType.NOTICE)
    assert notice.data == {"code": "agent_step_restarted", "text": "The agent restarted a step.",
                           "message_id": bed.message_id}
    assert bed.log.types[-2:] == [FrameType.MESSAGE_COMPLETED, FrameType.AGENT_COMPLETE]
    message = await bed.message()
    assert message.status == MessageStatus.COMPLETE.value and message.content == "Let me check. The answer is 42."
    assert message.agent_metadata["restarted_steps"] == 1
    # No dead letter, no error, no second message: the turn simply completed.
    assert not bed.log.of(FrameType.MESSAGE_ERROR) and len(bed.log.of(FrameType.MESSAGE_CREATED)) == 1


async def test_the_text_so_far_of_a_streaming_reply_applies_each_delta_at_its_offset(bed: Bed) -> None:
    """A page opened mid-reply after the agent restarted a step gets the text that stands, not the
    cut step's text followed by its new one."""
    events = [*numbered([chunk("Let me check. "), chunk("The ans")]),
              envelope(1001, EventType.RUN_RESUMED, {"checkpoint_seq": 1, "answer_chars": 14}),
              envelope(1002, EventType.ANSWER_CHUNK, {"text": "The a"})]
    await bed.processor(queue_size=1).process(bed.turn(), stream_of(events))  # no end: interrupted
    await bed.writer.flush()
    async with transaction(bed.sessionmaker) as session:
        text, _ = await FrameRepository(session).streamed_text(
            bed.conversation_id, bed.message_id, started_at=utcnow() - timedelta(minutes=1))
    assert text == "Let me check. The a"


async def test_a_stream_that_breaks_mid_run_ends_the_message_as_error(bed: Bed) -> None:
    events = numbered([(EventType.THOUGHT, {"text": "hm"}), chunk("The answer "), chunk("is")])
    broken = AgentStreamError("the event stream broke and 3 reconnects failed (AgentTransportError)")
    outcome = await bed.processor().process(bed.turn(), stream_of(events, then_raise=broken))

    assert outcome.kind is TurnOutcomeKind.INTERRUPTED
    assert outcome.content == "The answer is" and outcome.last_seq == 3 and outcome.error is broken
    assert bed.log.types[-2:] == [FrameType.MESSAGE_ERROR, FrameType.AGENT_ERROR]
    message_error, agent_error = bed.log.frames[-2:]
    assert message_error.data["text"] == broken.user_message and message_error.data["content"] == "The answer is"
    assert agent_error.data["retryable"] is True and "reconnects" not in agent_error.data["message"]
    message = await bed.message()
    assert message.status == MessageStatus.ERROR.value and message.content == "The answer is"
    assert message.agent_metadata["last_event_seq"] == 3
    assert (await bed.session_row()).status == AgentSessionStatus.FAILED.value


async def test_an_unexpected_failure_of_the_stream_is_reported_without_its_details(bed: Bed) -> None:
    events = numbered([chunk("so far")])
    outcome = await bed.processor().process(
        bed.turn(), stream_of(events, then_raise=RuntimeError("socket fd 17 in bad state"))
    )
    assert outcome.kind is TurnOutcomeKind.INTERRUPTED and outcome.error_code == "stream_interrupted"
    agent_error = bed.log.of(FrameType.AGENT_ERROR)[-1]
    assert "connection to the agent was lost" in agent_error.data["message"]
    assert all("fd 17" not in str(f.data) for f in bed.log.frames)
    assert (await bed.message()).content == "so far"


async def test_a_stream_ending_without_a_terminal_event_is_an_interruption(bed: Bed) -> None:
    outcome = await bed.processor().process(bed.turn(), stream_of(numbered([chunk("half")])))
    assert outcome.kind is TurnOutcomeKind.INTERRUPTED
    message = await bed.message()
    assert message.status == MessageStatus.ERROR.value and message.content == "half"
    assert bed.log.types[-1] == FrameType.AGENT_ERROR


class SlowHub(InProcessHub):
    """A hub whose fan-out is slow (a remote hub under load): each publish takes several loop
    turns, and every one after the first ``free`` waits until the test opens the gate."""

    def __init__(self, gate: asyncio.Event, turns_per_publish: int, free: int = 0) -> None:
        super().__init__()
        self.gate = gate
        self.turns = turns_per_publish
        self.free = free

    async def publish(self, frame: Frame) -> None:
        if self.free > 0:
            self.free -= 1
        else:
            await self.gate.wait()
        for _ in range(self.turns):
            await asyncio.sleep(0)
        await super().publish(frame)


def _processor_on(bed: Bed, hub: InProcessHub, queue_size: int = 64) -> tuple[AgentEventProcessor, FrameLog]:
    """A processor publishing through ``hub``, and what a client of the conversation gets from it."""
    log = FrameLog()
    hub.subscribe(bed.conversation_id, log)
    publisher = FramePublisher(bed.seq, bed.writer, hub, bed.metrics.frames)
    return _processor(bed, publisher, queue_size), log


def _processor(bed: Bed, publisher: FramePublisher, queue_size: int) -> AgentEventProcessor:
    transactions = Transactions(bed.sessionmaker, budget_s=5)
    return AgentEventProcessor(transactions, publisher, bed.metrics.agent, ReplyEnder(transactions, publisher),
                               queue_size=queue_size, ask_user_timeout_s=ASK_USER_TIMEOUT_S)


async def test_an_idle_processor_publishes_in_the_readers_step_and_coalesces_what_queued_while_busy(bed: Bed) -> None:
    gate = asyncio.Event()
    # The first publish goes straight through; the second waits for the gate: the processor is busy.
    processor, log = _processor_on(bed, SlowHub(gate, turns_per_publish=0, free=1))
    loop = asyncio.get_running_loop()
    loop_passes: list[str] = []
    seen: dict[str, Any] = {}

    async def events():
        loop.call_soon(loop_passes.append, "a loop pass")
        yield envelope(1, EventType.THOUGHT, {"text": "first", "step": 1})
        # Resumed for the next event: the first one's frame must be out already, and the callback
        # scheduled before it was read must not have run (no pass of the loop in between).
        seen["after first"] = (list(log.types), list(loop_passes))
        yield envelope(2, EventType.THOUGHT, {"text": "second", "step": 2})
        seen["after second"] = list(log.types)
        for seq, text in enumerate("abcd", start=3):
            yield envelope(seq, EventType.ANSWER_CHUNK, {"text": text})
        gate.set()
        yield envelope(7, EventType.COMPLETE, {"answer": "abcd"})

    outcome = await asyncio.wait_for(processor.process(bed.turn(), events()), 10)

    assert seen["after first"] == ([FrameType.AGENT_THINKING], [])
    assert seen["after second"] == [FrameType.AGENT_THINKING]  # still being published
    assert outcome.kind is TurnOutcomeKind.COMPLETE and outcome.content == "abcd"
    # The four chunks read while the processor was busy went out as one delta.
    assert log.types == [FrameType.AGENT_THINKING, FrameType.AGENT_THINKING, FrameType.MESSAGE_DELTA,
                         FrameType.MESSAGE_COMPLETED, FrameType.AGENT_COMPLETE]
    delta = log.of(FrameType.MESSAGE_DELTA)[0]
    assert delta.data == {"message_id": bed.message_id, "text": "abcd", "offset": 0}
    assert len(log.stamps[delta.seq]) == 4
    assert [f.data["text"] for f in log.of(FrameType.AGENT_THINKING)] == ["first", "second"]


class StuckHub(InProcessHub):
    """A hub whose publish never finishes; it records being cancelled."""

    def __init__(self) -> None:
        super().__init__()
        self.publishing = asyncio.Event()
        self.cancelled = False

    async def publish(self, frame: Frame) -> None:
        self.publishing.set()
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            self.cancelled = True
            raise


async def test_cancelling_the_turn_stops_the_processing_under_way_before_it_returns(bed: Bed) -> None:
    hub = StuckHub()
    processor, _ = _processor_on(bed, hub)

    async def events():
        yield envelope(1, EventType.THOUGHT, {"text": "hm", "step": 1})
        await asyncio.get_running_loop().create_future()  # the agent goes quiet

    stopped_on_return: list[bool] = []

    async def turn() -> None:
        try:
            await processor.process(bed.turn(), events())
        finally:
            stopped_on_return.append(hub.cancelled)  # in the step process() ended in

    run = asyncio.create_task(turn())
    await asyncio.wait_for(hub.publishing.wait(), 10)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert stopped_on_return == [True]


async def test_the_bounded_queue_holds_the_reader_back(bed: Bed) -> None:
    queue_size = 8
    n_chunks = 400
    gate = asyncio.Event()
    # Every publish waits for the gate, the first one too: the processor is busy from the start.
    processor, log = _processor_on(bed, SlowHub(gate, turns_per_publish=5), queue_size=queue_size)
    produced = 0
    max_lead = 0
    reader_blocked = asyncio.Event()

    async def events():
        nonlocal produced, max_lead
        for seq in range(1, n_chunks + 1):
            await asyncio.sleep(0)  # a network read
            produced += 1
            published = sum(len(f.data["text"]) for f in log.of(FrameType.MESSAGE_DELTA))
            max_lead = max(max_lead, produced - published)
            if produced == queue_size + 2:
                reader_blocked.set()
            yield envelope(seq, EventType.ANSWER_CHUNK, {"text": "x"})
        yield envelope(n_chunks + 1, EventType.COMPLETE, {"answer": "x" * n_chunks})

    run = asyncio.create_task(processor.process(bed.turn(), events()))
    await asyncio.wait_for(reader_blocked.wait(), 10)
    # Give the reader many chances to run further ahead; with an unbounded buffer it would pull
    # one event per loop turn.
    for _ in range(200):
        await asyncio.sleep(0)
    # One event in the processor's hands, queue_size queued, one read and waiting for room.
    assert produced == queue_size + 2
    assert log.of(FrameType.MESSAGE_DELTA) == []
    gate.set()
    outcome = await asyncio.wait_for(run, 60)

    assert outcome.kind is TurnOutcomeKind.COMPLETE and outcome.content == "x" * n_chunks
    assert "".join(f.data["text"] for f in log.of(FrameType.MESSAGE_DELTA)) == "x" * n_chunks
    # The reader never got further ahead than the chunks being published (at most a queue's worth,
    # coalesced), a full queue and one waiting for room.
    assert queue_size + 2 <= max_lead <= 2 * queue_size + 1


async def test_processing_many_runs_keeps_statement_count_independent_of_chunks(database_url: str) -> None:
    """Same number of statements (frames aside) for a 5-chunk and a 500-chunk answer."""
    counts = []
    for n_chunks in (5, 500):
        # One seq reservation covers the whole answer: this compares the processor's own statements,
        # and a block reserved mid-answer could coalesce chunks that queued meanwhile.
        async with _make_bed(database_url, flush_interval=0.05, agent_session_id=f"agent-sess-{n_chunks}",
                             seq_block=10_000) as bed:
            await bed.writer.flush()
            statements = StatementLog(bed.engine)
            try:
                answer = "y" * n_chunks
                events = numbered([*(chunk("y") for _ in range(n_chunks)), (EventType.COMPLETE, {"answer": answer})])
                outcome = await bed.processor().process(bed.turn(), stream_of(events))
                await bed.writer.flush()
            finally:
                statements.close()
            assert outcome.kind is TurnOutcomeKind.COMPLETE
            async with transaction(bed.sessionmaker) as session:
                frames = await session.scalar(select(func.count()).select_from(ConversationFrame)
                                              .where(ConversationFrame.conversation_id == bed.conversation_id))
            assert frames == 1 + n_chunks + 2
            counts.append(len([s for s in statements.statements if "CONVERSATION_FRAMES" not in s
                               and not s.startswith("UPDATE CONVERSATIONS SET LAST_SEQ")
                               # seq reservations are frame bookkeeping too: one per block of 100
                               and not s.startswith("UPDATE CONVERSATIONS SET SEQ_RESERVED")
                               # the turn's progress rides with each frame batch: one per batch,
                               # and a loaded machine splits 500 chunks into more batches
                               and not s.startswith("UPDATE TURNS SET KIND")]))
    assert counts[0] == counts[1], counts
