"""``coalesce``: a model's deltas that arrive within the budget go on as one, in order, the first at
once; anything else, the end and an error flush what is held first; the budget is kept while the
model is silent, without cancelling the model's stream; 0 is the stream itself."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from shared.fastpath.coalesce import HOLD_MAX_CHARS, aclose_stream, coalesce, valid_budget_ms
from shared.llm.base import (
    DELTA_TYPES,
    LLMConnectionError,
    LLMDone,
    LLMEvent,
    ReasoningDelta,
    TextDelta,
    ToolCall,
)

LONG_MS = 60_000  # a budget no test waits out: what flushes is the event under test, not the timer
WITHIN_S = 5.0  # how long a test waits for something due at once before failing (never reached when it passes)


class Model:
    """A model's stream the test drives: ``send`` puts events on the wire, ``end``/``fail`` end it.
    It counts the events read from it and says whether it was closed."""

    _END = object()

    def __init__(self) -> None:
        self._wire: asyncio.Queue[object] = asyncio.Queue()
        self.read = 0
        self.closed = False

    def send(self, *events: LLMEvent) -> None:
        for event in events:
            self._wire.put_nowait(event)

    def end(self) -> None:
        self._wire.put_nowait(self._END)

    def fail(self, error: Exception) -> None:
        self._wire.put_nowait(error)

    async def stream(self) -> AsyncIterator[LLMEvent]:
        try:
            while True:
                item = await self._wire.get()
                if item is self._END:
                    return
                if isinstance(item, Exception):
                    raise item
                self.read += 1
                yield item  # type: ignore[misc]
        finally:
            self.closed = True


async def until(condition: Callable[[], bool]) -> None:
    """Lets the loop go round until ``condition`` holds (the pump has read what was sent)."""
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


async def next_of(stream: AsyncIterator[LLMEvent]) -> LLMEvent:
    return await asyncio.wait_for(stream.__anext__(), WITHIN_S)


async def test_off_is_the_stream_itself() -> None:
    source = Model().stream()
    assert coalesce(source, 0, DELTA_TYPES) is source


@pytest.mark.parametrize("value", [-1, -0.001, 1000.5, 5000, float("nan"), float("inf")])
def test_a_budget_outside_0_to_1000_ms_is_refused_with_what_the_setting_means(value: float) -> None:
    with pytest.raises(ValueError, match="0 \\(off, one event per delta\\) to 1000"):
        valid_budget_ms(value)


@pytest.mark.parametrize("value", [0, 0.5, 25, 1000])
def test_a_budget_from_0_to_1000_ms_is_taken(value: float) -> None:
    assert valid_budget_ms(value) == value


async def test_the_first_text_delta_is_not_held() -> None:
    model = Model()
    stream = coalesce(model.stream(), LONG_MS, DELTA_TYPES)
    model.send(TextDelta("Hel"))
    assert await next_of(stream) == TextDelta("Hel")
    await aclose_stream(stream)


async def test_deltas_that_arrive_while_one_waits_go_on_as_one_before_a_tool_call() -> None:
    model = Model()
    stream = coalesce(model.stream(), LONG_MS, DELTA_TYPES)
    model.send(TextDelta("a"))
    assert await next_of(stream) == TextDelta("a")
    call = ToolCall(id="c1", name="add", arguments={"a": 1})
    model.send(TextDelta("b"), TextDelta("c"), TextDelta("d"), call, TextDelta("e"))
    assert await next_of(stream) == TextDelta("bcd")
    assert await next_of(stream) == call
    model.send(TextDelta("f"), LLMDone(completion_tokens=6))
    assert await next_of(stream) == TextDelta("ef")
    assert await next_of(stream) == LLMDone(completion_tokens=6)
    model.end()
    with pytest.raises(StopAsyncIteration):
        await next_of(stream)
    await aclose_stream(stream)


async def test_the_end_of_the_stream_flushes_what_is_held() -> None:
    model = Model()
    stream = coalesce(model.stream(), LONG_MS, DELTA_TYPES)
    model.send(TextDelta("a"), TextDelta("b"), TextDelta("c"))
    model.end()
    assert [event async for event in stream] == [TextDelta("a"), TextDelta("bc")]


async def test_an_error_is_raised_after_the_held_text_is_out() -> None:
    model = Model()
    stream = coalesce(model.stream(), LONG_MS, DELTA_TYPES)
    model.send(TextDelta("a"), TextDelta("b"), TextDelta("c"))
    model.fail(LLMConnectionError("the connection broke"))
    assert await next_of(stream) == TextDelta("a")
    assert await next_of(stream) == TextDelta("bc")
    with pytest.raises(LLMConnectionError, match="the connection broke"):
        await next_of(stream)


async def test_held_text_is_released_when_the_budget_runs_out_while_the_model_is_silent() -> None:
    model = Model()
    budget_ms = 30
    stream = coalesce(model.stream(), budget_ms, DELTA_TYPES)
    model.send(TextDelta("a"))
    assert await next_of(stream) == TextDelta("a")
    loop = asyncio.get_running_loop()
    sent = loop.time()
    model.send(TextDelta("b"), TextDelta("c"))
    # Nothing more comes from the model: the chunk is released by the budget alone.
    assert await next_of(stream) == TextDelta("bc")
    assert loop.time() - sent >= budget_ms / 1000 * 0.99  # held for the budget (the loop's clock), not less
    assert model.read == 3 and not model.closed
    # The model's stream was not cancelled while the reader waited: it goes on.
    model.send(TextDelta("d"), LLMDone())
    assert await next_of(stream) == TextDelta("d")
    assert await next_of(stream) == LLMDone()
    model.end()
    with pytest.raises(StopAsyncIteration):
        await next_of(stream)
    assert model.closed


async def test_a_reader_already_waiting_when_the_chunk_starts_gets_it_when_the_budget_runs_out() -> None:
    model = Model()
    budget_ms = 20
    stream = coalesce(model.stream(), budget_ms, DELTA_TYPES)
    model.send(TextDelta("a"))
    assert await next_of(stream) == TextDelta("a")
    reader = asyncio.ensure_future(stream.__anext__())
    for _ in range(20):  # the reader waits, with nothing held; the pump waits on the model
        await asyncio.sleep(0)
    assert not reader.done()
    loop = asyncio.get_running_loop()
    sent = loop.time()
    model.send(TextDelta("b"), TextDelta("c"))
    # Nothing more comes from the model and nothing else wakes the reader: the budget does.
    assert await asyncio.wait_for(reader, WITHIN_S) == TextDelta("bc")
    assert loop.time() - sent >= budget_ms / 1000 * 0.99
    await aclose_stream(stream)


async def test_a_model_that_keeps_streaming_is_cut_into_chunks_by_the_budget() -> None:
    model = Model()
    budget_ms = 20
    stream = coalesce(model.stream(), budget_ms, DELTA_TYPES)

    async def produce() -> None:
        for i in range(60):
            model.send(TextDelta(f"{i} "))
            await asyncio.sleep(0.002)  # the model's pace: a token every 2 ms
        model.end()

    producer = asyncio.ensure_future(produce())
    out = [event async for event in stream]
    await producer
    assert "".join(e.text for e in out) == "".join(f"{i} " for i in range(60))  # type: ignore[union-attr]
    # 60 tokens over >= 120 ms, released every 20 ms: neither one chunk per token nor one for all.
    assert 3 <= len(out) <= 30, [e.text for e in out]  # type: ignore[union-attr]


async def test_a_reader_that_asks_late_gets_everything_that_arrived_meanwhile_as_one() -> None:
    model = Model()
    stream = coalesce(model.stream(), 1, DELTA_TYPES)
    model.send(TextDelta("a"))
    assert await next_of(stream) == TextDelta("a")
    model.send(TextDelta("b"))
    await until(lambda: model.read == 2)  # the pump took it: the budget starts
    await asyncio.sleep(0.01)  # the reader is busy (a write) past the budget
    model.send(TextDelta("c"), TextDelta("d"))
    await until(lambda: model.read == 4)
    assert await next_of(stream) == TextDelta("bcd")
    await aclose_stream(stream)


async def test_reasoning_is_joined_the_same_way_and_flushed_by_text() -> None:
    model = Model()
    stream = coalesce(model.stream(), LONG_MS, DELTA_TYPES)
    model.send(ReasoningDelta("Let"), ReasoningDelta(" me"), ReasoningDelta(" think"), TextDelta("It"),
               TextDelta(" is"), TextDelta(" 4"), ReasoningDelta("checked"), LLMDone())
    model.end()
    assert [event async for event in stream] == [
        ReasoningDelta("Let"), ReasoningDelta(" me think"), TextDelta("It"), TextDelta(" is 4"),
        ReasoningDelta("checked"), LLMDone(),
    ]


async def test_order_is_kept_and_the_joined_text_is_the_concatenation() -> None:
    events: list[LLMEvent] = []
    for turn in range(5):
        events += [ReasoningDelta(f"r{turn}.{i} ") for i in range(3)]
        events += [TextDelta(f"t{turn}.{i} ") for i in range(7)]
        events.append(ToolCall(id=f"c{turn}", name="add", arguments={"turn": turn}))
    events.append(LLMDone(completion_tokens=len(events)))
    model = Model()
    stream = coalesce(model.stream(), LONG_MS, DELTA_TYPES)
    model.send(*events)
    model.end()
    out = [event async for event in stream]
    assert len(out) < len(events)
    assert [e for e in out if not isinstance(e, TextDelta | ReasoningDelta)] == [
        e for e in events if not isinstance(e, TextDelta | ReasoningDelta)]
    for kind in (TextDelta, ReasoningDelta):
        assert "".join(e.text for e in out if type(e) is kind) == "".join(e.text for e in events if type(e) is kind)
    # Between two tool calls: a thought, then the answer's text, each whole, never interleaved.
    calls = [i for i, e in enumerate(out) if isinstance(e, ToolCall)]
    second_turn = out[calls[0] + 1:calls[1]]
    assert second_turn == [ReasoningDelta("r1.0 r1.1 r1.2 "), TextDelta("".join(f"t1.{i} " for i in range(7)))]


async def test_empty_deltas_are_dropped() -> None:
    model = Model()
    stream = coalesce(model.stream(), LONG_MS, DELTA_TYPES)
    model.send(TextDelta(""), TextDelta("a"), TextDelta(""), TextDelta("b"), LLMDone())
    model.end()
    assert [event async for event in stream] == [TextDelta("a"), TextDelta("b"), LLMDone()]


async def test_a_reader_far_behind_gets_the_held_text_at_once_and_the_model_waits_for_it() -> None:
    model = Model()
    stream = coalesce(model.stream(), LONG_MS, DELTA_TYPES)
    model.send(TextDelta("first"))
    assert await next_of(stream) == TextDelta("first")
    piece = "x" * 1024
    pieces = HOLD_MAX_CHARS // len(piece)
    model.send(*[TextDelta(piece)] * (pieces + 3))
    # The model is not read past the full chunk until the reader takes it, however long that takes.
    await until(lambda: model.read >= 1 + pieces)
    for _ in range(20):
        await asyncio.sleep(0)
    assert model.read == 1 + pieces
    # Due at once, not after the budget.
    assert await next_of(stream) == TextDelta(piece * pieces)
    # The rest is read once the reader took that, and held again until what comes next flushes it.
    model.send(LLMDone())
    assert await next_of(stream) == TextDelta(piece * 3)
    assert await next_of(stream) == LLMDone()
    await aclose_stream(stream)
    assert model.closed


async def test_closing_stops_the_pump_waiting_on_the_model_and_closes_the_model_stream() -> None:
    model = Model()
    stream = coalesce(model.stream(), LONG_MS, DELTA_TYPES)
    model.send(TextDelta("a"), TextDelta("b"))
    assert await next_of(stream) == TextDelta("a")
    await until(lambda: model.read == 2)
    await aclose_stream(stream)  # the pump waits on the model's next event
    assert model.closed


async def test_a_reader_cancelled_while_it_waits_leaves_the_stream_closable() -> None:
    model = Model()
    stream = coalesce(model.stream(), LONG_MS, DELTA_TYPES)
    model.send(TextDelta("a"), TextDelta("b"))
    assert await next_of(stream) == TextDelta("a")
    reader = asyncio.ensure_future(stream.__anext__())
    await until(lambda: model.read == 2)
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    await aclose_stream(stream)
    assert model.closed


def test_both_services_read_the_setting_default_25_and_refuse_a_budget_out_of_range(monkeypatch) -> None:
    from pydantic import ValidationError

    from agent_service.settings import AgentServiceSettings
    from conversation_service.settings import ConversationSettings

    monkeypatch.delenv("STREAM_COALESCE_MS", raising=False)
    monkeypatch.delenv("AGENT_SERVICE_STREAM_COALESCE_MS", raising=False)
    assert AgentServiceSettings().stream_coalesce_ms == 25 and ConversationSettings().stream_coalesce_ms == 25
    monkeypatch.setenv("STREAM_COALESCE_MS", "0")
    assert AgentServiceSettings().stream_coalesce_ms == 0 and ConversationSettings().stream_coalesce_ms == 0
    monkeypatch.setenv("AGENT_SERVICE_STREAM_COALESCE_MS", "10")  # the Agent Service's own name comes first
    assert AgentServiceSettings().stream_coalesce_ms == 10
    for wrong in ("-5", "1001"):
        monkeypatch.setenv("STREAM_COALESCE_MS", wrong)
        monkeypatch.setenv("AGENT_SERVICE_STREAM_COALESCE_MS", wrong)
        for settings in (AgentServiceSettings, ConversationSettings):
            with pytest.raises(ValidationError, match="STREAM_COALESCE_MS is how long a delta may wait"):
                settings()
