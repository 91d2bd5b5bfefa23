"""The event stream (respx): cut mid-event, resumption with Last-Event-ID, validation of events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest
import respx

from conversation_service.agent_client import (
    AgentClientConfig,
    AgentNotFoundError,
    AgentProtocolError,
    AgentServiceClient,
    AgentStreamError,
    AgentTimeoutError,
    RetryEvent,
)
from shared.protocol import EventType, ExecuteRequest, UserContext
from tests.unit.conversation_service.agent_client.sse_support import (
    API_KEY,
    BASE_URL,
    FAST,
    SESSION_ID,
    RecordingSleep,
    sse_event,
    sse_events,
)

EXECUTE_URL = f"{BASE_URL}/api/v1/agent/execute"
EVENTS_URL = f"{BASE_URL}/api/v1/agent/sessions/{SESSION_ID}/events"
STATUS_URL = f"{BASE_URL}/api/v1/agent/sessions/{SESSION_ID}"
SSE_HEADERS = {"content-type": "text/event-stream; charset=utf-8"}


def request() -> ExecuteRequest:
    return ExecuteRequest(message="find the report", user_context=UserContext(user_id="u1"))


def body(*parts: bytes, then: Exception | None = None) -> AsyncIterator[bytes]:
    """A response body sent in the given pieces, optionally breaking with ``then`` afterwards."""

    async def gen() -> AsyncIterator[bytes]:
        for part in parts:
            yield part
        if then is not None:
            raise then

    return gen()


def sse(*parts: bytes, then: Exception | None = None) -> httpx.Response:
    return httpx.Response(200, headers=SSE_HEADERS, content=body(*parts, then=then))


def status_json(last_seq: int, state: str) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "session_id": SESSION_ID,
            "profile_name": "default",
            "status": state,
            "last_seq": last_seq,
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
        },
    )


async def collect(stream) -> list[int]:
    async with stream:
        return [event.seq async for event in stream]


@respx.mock
async def test_happy_path_ends_at_the_terminal_event(client: AgentServiceClient) -> None:
    respx.post(EXECUTE_URL).mock(return_value=sse(b": hello\n\n", sse_events(1, 4, terminal=EventType.COMPLETE)))
    stream = client.execute_agent(request())
    async with stream:
        assert stream.session_id == SESSION_ID  # known as soon as the stream is open
        events = [event async for event in stream]
    assert [e.seq for e in events] == [1, 2, 3, 4]
    assert events[-1].type is EventType.COMPLETE and stream.terminal_event is events[-1]
    assert stream.last_seq == 4 and stream.run_id == "run-1"
    assert stream.finished and stream.retries == 0 and stream.reconnects == 0


@respx.mock
async def test_iterating_without_async_with_opens_and_closes_the_stream(client: AgentServiceClient) -> None:
    respx.post(EXECUTE_URL).mock(return_value=sse(sse_events(1, 2, terminal=EventType.ASK_USER)))
    stream = client.execute_agent(request())
    seqs = [event.seq async for event in stream]
    assert seqs == [1, 2] and stream.finished
    assert stream.terminal_event is not None and stream.terminal_event.type is EventType.ASK_USER


@respx.mock
async def test_a_stream_cut_mid_event_resumes_with_last_event_id_and_no_duplicate(
    client: AgentServiceClient, recording_sleep: RecordingSleep
) -> None:
    third = sse_event(3)
    respx.post(EXECUTE_URL).mock(
        return_value=sse(sse_events(1, 2), third[: len(third) // 2], then=httpx.ReadError("connection reset"))
    )
    # The replay starts one event early, as a service that replays from a checkpoint may do.
    events_route = respx.get(EVENTS_URL).mock(return_value=sse(sse_events(2, 5, terminal=EventType.COMPLETE)))
    hooked: list[RetryEvent] = []
    client.on_reconnect = hooked.append
    stream = client.execute_agent(request())
    assert await collect(stream) == [1, 2, 3, 4, 5]
    assert events_route.call_count == 1
    resumed = events_route.calls.last.request
    assert resumed.headers["Last-Event-ID"] == "2"
    assert resumed.headers["X-API-Key"] == API_KEY
    assert stream.reconnects == 1 and stream.duplicates_dropped == 1 and stream.retries == 0
    assert recording_sleep.delays == [FAST.reconnect_delays[0]]
    assert [(e.operation, e.attempt) for e in hooked] == [("execute:reconnect", 1)]


@respx.mock
async def test_a_body_that_ends_cleanly_inside_an_event_is_resumed(client: AgentServiceClient) -> None:
    second = sse_event(2)
    respx.post(EXECUTE_URL).mock(return_value=sse(sse_event(1), second[:-1]))  # the blank line never came
    respx.get(EVENTS_URL).mock(return_value=sse(sse_events(2, 3, terminal=EventType.COMPLETE)))
    stream = client.execute_agent(request())
    assert await collect(stream) == [1, 2, 3]
    assert stream.reconnects == 1


@respx.mock
async def test_a_clean_end_before_the_terminal_event_asks_the_status_then_resumes(client: AgentServiceClient) -> None:
    respx.post(EXECUTE_URL).mock(return_value=sse(sse_events(1, 2)))
    respx.get(STATUS_URL).mock(return_value=status_json(3, "ACTIVE"))
    respx.get(EVENTS_URL).mock(return_value=sse(sse_event(3, EventType.COMPLETE)))
    stream = client.execute_agent(request())
    assert await collect(stream) == [1, 2, 3]
    assert stream.reconnects == 1


@respx.mock
async def test_stream_events_ends_when_the_session_is_settled_and_fully_read(client: AgentServiceClient) -> None:
    events_route = respx.get(EVENTS_URL).mock(return_value=sse(sse_events(8, 9)))
    respx.get(STATUS_URL).mock(return_value=status_json(9, "AWAITING_USER"))
    stream = client.stream_events(SESSION_ID, last_event_id=7)
    assert await collect(stream) == [8, 9]
    assert events_route.calls.last.request.headers["Last-Event-ID"] == "7"
    assert stream.reconnects == 0


@respx.mock
async def test_stream_events_with_nothing_left_is_empty(client: AgentServiceClient) -> None:
    respx.get(EVENTS_URL).mock(return_value=sse(b": heartbeat\n\n"))
    respx.get(STATUS_URL).mock(return_value=status_json(9, "COMPLETED"))
    stream = client.stream_events(SESSION_ID, last_event_id=9)
    assert await collect(stream) == []
    assert stream.finished


@respx.mock
async def test_stream_events_reads_past_the_terminal_events_of_earlier_runs(client: AgentServiceClient) -> None:
    log = sse_events(1, 2, terminal=EventType.COMPLETE) + sse_events(3, 5, terminal=EventType.ASK_USER)
    respx.get(EVENTS_URL).mock(return_value=sse(log))
    respx.get(STATUS_URL).mock(return_value=status_json(5, "AWAITING_USER"))
    stream = client.stream_events(SESSION_ID)
    assert await collect(stream) == [1, 2, 3, 4, 5]
    assert stream.terminal_event is not None and stream.terminal_event.seq == 5


@respx.mock
async def test_stream_events_drops_what_the_consumer_already_has(client: AgentServiceClient) -> None:
    respx.get(EVENTS_URL).mock(return_value=sse(sse_events(1, 6, terminal=EventType.COMPLETE)))
    respx.get(STATUS_URL).mock(return_value=status_json(6, "COMPLETED"))
    stream = client.stream_events(SESSION_ID, last_event_id=4)
    assert await collect(stream) == [5, 6]
    assert stream.duplicates_dropped == 4


@respx.mock
async def test_a_gap_in_the_sequence_is_accepted_and_counted(client: AgentServiceClient) -> None:
    """A crashed run's events shown but never written leave a hole before the ERROR that ends it."""
    respx.post(EXECUTE_URL).mock(return_value=sse(sse_events(1, 2), sse_event(1001, EventType.ERROR)))
    stream = client.execute_agent(request())
    seen: list[int] = []
    async with stream:
        async for event in stream:
            seen.append(event.seq)
    assert seen == [1, 2, 1001] and stream.finished
    assert stream.seqs_skipped == 998 and stream.last_seq == 1001
    assert stream.terminal_event is not None and stream.terminal_event.seq == 1001


@pytest.mark.parametrize(
    "bad",
    [
        b"id: 1\nevent: THOUGHT\ndata: {not json\n\n",
        b'id: 1\nevent: THOUGHT\ndata: {"seq": 1}\n\n',
        # the payload does not match its type
        (
            b'id: 1\nevent: THOUGHT\ndata: {"session_id":"sess-1","run_id":"r","seq":1,"type":"THOUGHT",'
            b'"ts":"2026-01-01T00:00:00Z","data":{"nope":1}}\n\n'
        ),
        # answer chunks, whose payload is checked without its model: no text, a text that is not a string
        (
            b'id: 1\nevent: ANSWER_CHUNK\ndata: {"session_id":"sess-1","run_id":"r","seq":1,"type":"ANSWER_CHUNK",'
            b'"ts":"2026-01-01T00:00:00Z","data":{"txt":"a"}}\n\n'
        ),
        (
            b'id: 1\nevent: ANSWER_CHUNK\ndata: {"session_id":"sess-1","run_id":"r","seq":1,"type":"ANSWER_CHUNK",'
            b'"ts":"2026-01-01T00:00:00Z","data":{"text":7}}\n\n'
        ),
        # the SSE id and the envelope's seq disagree
        (
            b'id: 2\nevent: THOUGHT\ndata: {"session_id":"sess-1","run_id":"r","seq":1,"type":"THOUGHT",'
            b'"ts":"2026-01-01T00:00:00Z","data":{"text":"t"}}\n\n'
        ),
        # the SSE event name and the envelope's type disagree
        (
            b'id: 1\nevent: COMPLETE\ndata: {"session_id":"sess-1","run_id":"r","seq":1,"type":"THOUGHT",'
            b'"ts":"2026-01-01T00:00:00Z","data":{"text":"t"}}\n\n'
        ),
        b"id: 1\nevent: THOUGHT\ndata: \xff\xfe\xfd\xfc\xfb\n\n",
    ],
)
@respx.mock
async def test_invalid_events_are_protocol_errors_and_not_retried(client: AgentServiceClient, bad: bytes) -> None:
    route = respx.post(EXECUTE_URL).mock(return_value=sse(bad))
    with pytest.raises(AgentProtocolError) as info:
        await collect(client.execute_agent(request()))
    assert route.call_count == 1
    assert not info.value.retryable


@respx.mock
async def test_an_event_of_another_session_is_refused(client: AgentServiceClient) -> None:
    respx.post(EXECUTE_URL).mock(return_value=sse(sse_event(1), sse_event(2, session_id="other")))
    with pytest.raises(AgentProtocolError, match="another session"):
        await collect(client.execute_agent(request()))


@respx.mock
async def test_an_oversized_event_is_refused_while_it_is_read(recording_sleep: RecordingSleep) -> None:
    config = AgentClientConfig(max_event_bytes=4096)
    head = b"id: 1\nevent: THOUGHT\ndata: " + b"x" * 1000
    # Never finished: the cap must trip on the partial event, not wait for its end.
    respx.post(EXECUTE_URL).mock(return_value=sse(head, *[b"x" * 1000] * 10))
    async with AgentServiceClient(BASE_URL, API_KEY, config=config, sleep=recording_sleep) as client:
        with pytest.raises(AgentProtocolError, match="exceeds 4096 bytes"):
            await collect(client.execute_agent(request()))


@respx.mock
async def test_a_large_event_under_the_cap_is_delivered(client: AgentServiceClient) -> None:
    big = sse_event(1, EventType.ANSWER_CHUNK, {"text": "y" * 200_000})
    pieces = [big[i : i + 7000] for i in range(0, len(big), 7000)]
    respx.post(EXECUTE_URL).mock(return_value=sse(*pieces, sse_event(2, EventType.COMPLETE)))
    stream = client.execute_agent(request())
    async with stream:
        events = [event async for event in stream]
    assert len(events[0].data["text"]) == 200_000 and events[1].seq == 2


@respx.mock
async def test_unknown_event_types_are_skipped_but_keep_the_sequence(client: AgentServiceClient) -> None:
    future = b'id: 2\nevent: PROGRESS\ndata: {"seq": 2, "type": "PROGRESS", "data": {}}\n\n'
    respx.post(EXECUTE_URL).mock(return_value=sse(sse_event(1), future, sse_event(3, EventType.COMPLETE)))
    stream = client.execute_agent(request())
    assert await collect(stream) == [1, 3]
    assert stream.unknown_events_skipped == 1


@respx.mock
async def test_waiting_events_are_parsed_not_skipped(client: AgentServiceClient) -> None:
    waiting = sse_event(2, EventType.WAITING, {"reason": "rate limit reached", "wait_s": 12.5, "limit": "requests"})
    respx.post(EXECUTE_URL).mock(return_value=sse(sse_event(1), waiting, sse_event(3, EventType.COMPLETE)))
    stream = client.execute_agent(request())
    async with stream:
        events = [event async for event in stream]
    assert [e.type for e in events] == [EventType.ANSWER_CHUNK, EventType.WAITING, EventType.COMPLETE]
    assert events[1].payload().wait_s == 12.5
    assert stream.unknown_events_skipped == 0


@respx.mock
async def test_artifact_events_are_parsed_not_skipped_and_a_hostile_one_is_a_protocol_error(
    client: AgentServiceClient,
) -> None:
    made = {"artifact_id": "a1", "name": "notes.md", "media_type": "text/markdown", "text": "# Notes"}
    artifact = sse_event(2, EventType.ARTIFACT, made)
    respx.post(EXECUTE_URL).mock(return_value=sse(sse_event(1), artifact, sse_event(3, EventType.COMPLETE)))
    stream = client.execute_agent(request())
    async with stream:
        events = [event async for event in stream]
    assert [e.type for e in events] == [EventType.ANSWER_CHUNK, EventType.ARTIFACT, EventType.COMPLETE]
    assert events[1].payload().text == "# Notes" and stream.unknown_events_skipped == 0
    script = sse_event(2, EventType.ARTIFACT, {**made, "text": None, "url": "javascript:alert(1)"})
    respx.post(EXECUTE_URL).mock(return_value=sse(sse_event(1), script))
    with pytest.raises(AgentProtocolError):
        await collect(client.execute_agent(request()))


@respx.mock
async def test_reconnects_are_bounded(client: AgentServiceClient, recording_sleep: RecordingSleep) -> None:
    respx.post(EXECUTE_URL).mock(return_value=sse(sse_event(1), then=httpx.ReadError("reset")))
    events_route = respx.get(EVENTS_URL).mock(return_value=httpx.Response(503, json={"error": "Busy"}))
    stream = client.execute_agent(request())
    seen: list[int] = []
    with pytest.raises(AgentStreamError) as info:
        async with stream:
            async for event in stream:
                seen.append(event.seq)
    assert seen == [1]
    assert events_route.call_count == 3
    assert stream.reconnects == 3
    assert recording_sleep.delays == list(FAST.reconnect_delays)
    assert "lost" in info.value.user_message


@respx.mock
async def test_a_stream_is_resumed_for_its_budget_after_the_delays_are_spent() -> None:
    # A partition longer than the delays (three 10 ms pauses) but within the budget: the last pause
    # repeats until the Agent Service answers again; the run's events waited in its log.
    config = AgentClientConfig(reconnect_delays=(0.01, 0.01, 0.01), resume_budget=5.0)
    respx.post(EXECUTE_URL).mock(return_value=sse(sse_event(1), then=httpx.ReadError("reset")))
    cut = [httpx.Response(503, json={"error": "Busy"})] * 12
    events_route = respx.get(EVENTS_URL).mock(side_effect=[*cut, sse(sse_events(2, 3, terminal=EventType.COMPLETE))])
    async with AgentServiceClient(BASE_URL, API_KEY, config=config) as client:
        stream = client.execute_agent(request())
        assert await collect(stream) == [1, 2, 3]
    assert events_route.call_count == 13 and stream.reconnects == 13


@respx.mock
async def test_a_stream_broken_for_longer_than_its_budget_is_given_up() -> None:
    config = AgentClientConfig(reconnect_delays=(0.01, 0.05), resume_budget=0.3)
    respx.post(EXECUTE_URL).mock(return_value=sse(sse_event(1), then=httpx.ReadError("reset")))
    events_route = respx.get(EVENTS_URL).mock(return_value=httpx.Response(503, json={"error": "Busy"}))
    async with AgentServiceClient(BASE_URL, API_KEY, config=config) as client:
        stream = client.execute_agent(request())
        started = asyncio.get_running_loop().time()
        with pytest.raises(AgentStreamError):
            await collect(stream)
        given_up_after = asyncio.get_running_loop().time() - started
    # Tried until the next pause would pass the budget: 0.01, then 0.05 s again and again.
    assert 0.25 <= given_up_after < 1.0 and events_route.call_count >= 6


@respx.mock
async def test_the_reconnect_budget_is_restored_by_progress(client: AgentServiceClient) -> None:
    # Each connection delivers one event then breaks: four breaks in a row with progress in between.
    cut = httpx.ReadError("reset")
    respx.post(EXECUTE_URL).mock(return_value=sse(sse_event(1), then=cut))
    respx.get(EVENTS_URL).mock(
        side_effect=[
            sse(sse_event(2), then=cut),
            sse(sse_event(3), then=cut),
            sse(sse_event(4), then=cut),
            sse(sse_event(5, EventType.COMPLETE)),
        ]
    )
    stream = client.execute_agent(request())
    assert await collect(stream) == [1, 2, 3, 4, 5]
    assert stream.reconnects == 4


@respx.mock
async def test_a_session_that_vanished_stops_the_reconnects(client: AgentServiceClient) -> None:
    respx.post(EXECUTE_URL).mock(return_value=sse(sse_event(1), then=httpx.RemoteProtocolError("peer closed")))
    events_route = respx.get(EVENTS_URL).mock(return_value=httpx.Response(404, json={"error": "NotFound"}))
    with pytest.raises(AgentNotFoundError):
        await collect(client.execute_agent(request()))
    assert events_route.call_count == 1


@respx.mock
async def test_a_break_before_the_first_event_retries_the_execute_with_the_same_key(
    client: AgentServiceClient,
) -> None:
    route = respx.post(EXECUTE_URL).mock(
        side_effect=[
            sse(b": heartbeat\n\n", then=httpx.ReadError("reset")),
            sse(b""),  # ended with nothing: retried as well
            sse(sse_events(1, 2, terminal=EventType.COMPLETE)),
        ]
    )
    stream = client.execute_agent(request())
    assert await collect(stream) == [1, 2]
    assert stream.retries == 2 and stream.reconnects == 0
    assert len({call.request.headers["Idempotency-Key"] for call in route.calls}) == 1


@respx.mock
async def test_a_non_sse_answer_is_a_protocol_error(client: AgentServiceClient) -> None:
    respx.post(EXECUTE_URL).mock(return_value=httpx.Response(200, json={"oops": True}))
    with pytest.raises(AgentProtocolError, match="text/event-stream"):
        await collect(client.execute_agent(request()))


def stalled(*parts: bytes) -> httpx.Response:
    """A body that sends ``parts`` and then nothing, until the client gives up."""

    async def gen() -> AsyncIterator[bytes]:
        for part in parts:
            yield part
        await asyncio.Event().wait()

    return httpx.Response(200, headers=SSE_HEADERS, content=gen())


@respx.mock
async def test_no_first_event_within_the_request_timeout(recording_sleep: RecordingSleep) -> None:
    config = AgentClientConfig(request_timeout=0.05, retry_delays=(0.001,))
    route = respx.post(EXECUTE_URL).mock(side_effect=lambda request: stalled(b": heartbeat\n\n"))
    async with AgentServiceClient(BASE_URL, API_KEY, config=config, sleep=recording_sleep) as client:
        with pytest.raises(AgentTimeoutError) as info:
            await collect(client.execute_agent(request()))
    assert route.call_count == 1  # a spent request timeout is reported, not repeated
    assert not info.value.retryable


@respx.mock
async def test_the_whole_stream_is_bounded_by_the_stream_timeout(recording_sleep: RecordingSleep) -> None:
    config = AgentClientConfig(stream_timeout=0.1)
    respx.post(EXECUTE_URL).mock(side_effect=lambda request: stalled(sse_event(1)))
    async with AgentServiceClient(BASE_URL, API_KEY, config=config, sleep=recording_sleep) as client:
        stream = client.execute_agent(request())
        seen: list[int] = []
        with pytest.raises(AgentTimeoutError):
            async with stream:
                async for event in stream:
                    seen.append(event.seq)
    assert seen == [1] and stream.reconnects == 0


@respx.mock
async def test_a_reconnect_that_would_end_past_the_stream_timeout_ends_the_stream_as_a_timeout(
    recording_sleep: RecordingSleep,
) -> None:
    # ResumableStream's rule, the same for an A2A agent's stream: no pause that ends past the time limit.
    config = AgentClientConfig(stream_timeout=5.0, reconnect_delays=(30.0,))
    respx.post(EXECUTE_URL).mock(return_value=sse(sse_events(1, 2), then=httpx.ReadError("reset")))
    events_route = respx.get(EVENTS_URL).mock(return_value=sse(sse_events(3, 3, terminal=EventType.COMPLETE)))
    async with AgentServiceClient(BASE_URL, API_KEY, config=config, sleep=recording_sleep) as client:
        stream = client.execute_agent(request())
        seen: list[int] = []
        with pytest.raises(AgentTimeoutError, match="time limit"):
            async with stream:
                async for event in stream:
                    seen.append(event.seq)
    assert seen == [1, 2] and recording_sleep.delays == [] and events_route.call_count == 0


@respx.mock
async def test_a_stream_silent_for_the_idle_timeout_is_resumed(recording_sleep: RecordingSleep) -> None:
    config = AgentClientConfig(read_timeout=0.2, reconnect_delays=(0.001,))
    respx.post(EXECUTE_URL).mock(side_effect=lambda request: stalled(sse_events(1, 2)))
    events_route = respx.get(EVENTS_URL).mock(return_value=sse(sse_events(3, 4, terminal=EventType.COMPLETE)))
    async with AgentServiceClient(BASE_URL, API_KEY, config=config, sleep=recording_sleep) as client:
        stream = client.execute_agent(request())
        assert await collect(stream) == [1, 2, 3, 4]
    assert stream.reconnects == 1 and events_route.calls.last.request.headers["Last-Event-ID"] == "2"


@respx.mock
async def test_only_waiting_for_bytes_counts_as_idle(recording_sleep: RecordingSleep) -> None:
    # The consumer takes longer than the idle timeout over each event; the service is never silent
    # while the client reads, so nothing times out and nothing reconnects.
    config = AgentClientConfig(read_timeout=0.1)
    respx.post(EXECUTE_URL).mock(return_value=sse(sse_events(1, 3, terminal=EventType.COMPLETE)))
    async with AgentServiceClient(BASE_URL, API_KEY, config=config, sleep=recording_sleep) as client:
        stream = client.execute_agent(request())
        seen: list[int] = []
        async with stream:
            async for event in stream:
                seen.append(event.seq)
                await asyncio.sleep(0.25)
    assert seen == [1, 2, 3] and stream.reconnects == 0


@respx.mock
async def test_a_cancelled_reader_is_cancelled_not_timed_out(recording_sleep: RecordingSleep) -> None:
    config = AgentClientConfig(read_timeout=0.2)
    respx.post(EXECUTE_URL).mock(side_effect=lambda request: stalled(sse_event(1)))
    async with AgentServiceClient(BASE_URL, API_KEY, config=config, sleep=recording_sleep) as client:
        stream = client.execute_agent(request())
        started = asyncio.Event()

        async def consume() -> None:
            async with stream:
                async for _ in stream:
                    started.set()

        task = asyncio.create_task(consume())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert stream.reconnects == 0 and stream.finished


class _ObservedBody(httpx.AsyncByteStream):
    """Sends one chunk, then stalls; records when the client closes it."""

    def __init__(self, first: bytes) -> None:
        self.first = first
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.first
        await asyncio.Event().wait()

    async def aclose(self) -> None:
        self.closed = True


@respx.mock
async def test_leaving_early_closes_the_response(client: AgentServiceClient) -> None:
    observed = _ObservedBody(sse_events(1, 2))
    respx.post(EXECUTE_URL).mock(return_value=httpx.Response(200, headers=SSE_HEADERS, stream=observed))
    stream = client.execute_agent(request())
    async with stream:
        async for event in stream:
            assert event.seq == 1
            break
    assert stream.finished
    assert observed.closed


@respx.mock
async def test_the_execute_body_is_the_request_model(client: AgentServiceClient) -> None:
    route = respx.post(EXECUTE_URL).mock(return_value=sse(sse_event(1, EventType.COMPLETE)))
    req = ExecuteRequest(session_id=SESSION_ID, message="go", user_context=UserContext(user_id="u1", org_id="o"))
    await collect(client.execute_agent(req))
    sent = route.calls.last.request
    assert ExecuteRequest.model_validate(orjson.loads(sent.content)) == req
    assert sent.headers["Accept"] == "text/event-stream"
