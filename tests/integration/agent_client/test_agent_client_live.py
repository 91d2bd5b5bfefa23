"""AgentServiceClient against the real Agent Service on loopback, on SQLite and PostgreSQL."""

from __future__ import annotations

import httpx
import pytest

from conversation_service.agent_client import (
    AgentAuthError,
    AgentBadRequestError,
    AgentClientConfig,
    AgentConflictError,
    AgentConnectError,
    AgentNotFoundError,
    AgentServiceClient,
    RetryEvent,
)
from shared.protocol import (
    Answer,
    AskUserData,
    CompleteData,
    EventType,
    ExecuteRequest,
    SessionStatus,
    UserContext,
)
from tests.integration.agent_client.fault_proxy import API_KEY, Fault, FaultProxy
from tests.support.servers import free_port

USER = UserContext(user_id="u-1", org_id="org-1")
QUICK = AgentClientConfig(retry_delays=(0.01, 0.02, 0.04), reconnect_delays=(0.01, 0.02, 0.04))


def ask(message: str, **kwargs) -> ExecuteRequest:
    return ExecuteRequest(message=message, user_context=USER, **kwargs)


def assert_contiguous(seqs: list[int]) -> None:
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs


async def test_execute_streams_a_run_to_completion(agent_service_url: str) -> None:
    async with AgentServiceClient(agent_service_url, API_KEY, config=QUICK) as client:
        assert (await client.health())["status"] == "ok"
        async with client.execute_agent(ask("what is 12*7?")) as stream:
            events = [event async for event in stream]
        types = [event.type for event in events]
        assert EventType.TOOL_START in types and EventType.TOOL_END in types
        assert types[-1] is EventType.COMPLETE
        assert "84" in CompleteData.model_validate(events[-1].data).answer
        assert_contiguous([event.seq for event in events])
        assert {event.session_id for event in events} == {stream.session_id}
        assert stream.retries == 0 and stream.reconnects == 0

        status = await client.get_session_status(stream.session_id)
        assert status.status is SessionStatus.COMPLETED
        assert status.last_seq == stream.last_seq == events[-1].seq


async def test_ask_user_then_answer_resumes_and_the_log_replays_exactly(agent_service_url: str) -> None:
    async with AgentServiceClient(agent_service_url, API_KEY, config=QUICK) as client:
        async with client.execute_agent(ask("plan a trip")) as first:
            first_events = [event async for event in first]
        question = AskUserData.model_validate(first_events[-1].data)
        assert first_events[-1].type is EventType.ASK_USER
        assert (await client.get_session_status(first.session_id)).status is SessionStatus.AWAITING_USER

        answer = Answer(question_id=question.question_id, text="Lisbon for 2 days")
        async with client.execute_agent(ask("", session_id=first.session_id, answer=answer)) as second:
            second_events = [event async for event in second]
        assert second.session_id == first.session_id
        assert second_events[0].seq == first.last_seq + 1
        assert second_events[-1].type is EventType.COMPLETE

        # The whole session from the start, then from the middle: exactly the events seen live.
        everything = client.stream_events(first.session_id)
        async with everything:
            replayed = [event async for event in everything]
        assert [e.model_dump() for e in replayed] == [e.model_dump() for e in first_events + second_events]
        tail = client.stream_events(first.session_id, last_event_id=first.last_seq)
        async with tail:
            assert [event.seq async for event in tail] == [event.seq for event in second_events]


async def test_the_same_idempotency_key_joins_the_run_instead_of_starting_another(agent_service_url: str) -> None:
    async with AgentServiceClient(agent_service_url, API_KEY, config=QUICK) as client:
        async with client.execute_agent(ask("what is 6*7?"), idempotency_key="msg-1") as one:
            events_one = [event async for event in one]
        async with client.execute_agent(ask("what is 6*7?"), idempotency_key="msg-1") as two:
            events_two = [event async for event in two]
    assert (two.session_id, two.run_id) == (one.session_id, one.run_id)
    assert [e.seq for e in events_two] == [e.seq for e in events_one]


async def test_errors_of_the_real_service_map_onto_the_tree(agent_service_url: str) -> None:
    retried: list[RetryEvent] = []
    async with AgentServiceClient(agent_service_url, "wrong-key", config=QUICK, on_retry=retried.append) as client:
        with pytest.raises(AgentAuthError) as info:
            async with client.execute_agent(ask("hello")):
                pass
        assert info.value.status_code == 401 and "wrong-key" not in str(info.value)
    async with AgentServiceClient(agent_service_url, API_KEY, config=QUICK, on_retry=retried.append) as client:
        with pytest.raises(AgentNotFoundError):
            async with client.execute_agent(ask("hello", profile_name="no-such-profile")):
                pass
        with pytest.raises(AgentBadRequestError):
            async with client.execute_agent(ask("   ")):
                pass
        with pytest.raises(AgentNotFoundError):
            await client.get_session_status("no-such-session")
        with pytest.raises(AgentNotFoundError):
            async with client.stream_events("no-such-session"):
                pass
    assert retried == []  # none of these is worth repeating


async def test_cancel_a_paused_session(agent_service_url: str) -> None:
    async with AgentServiceClient(agent_service_url, API_KEY, config=QUICK) as client:
        async with client.execute_agent(ask("plan a trip")) as stream:
            [event async for event in stream]
        status = await client.cancel(stream.session_id)
        assert status.status is SessionStatus.CANCELLED
        with pytest.raises(AgentConflictError):
            await client.cancel(stream.session_id)


def one_connection_per_request() -> httpx.AsyncClient:
    # The fault proxy decides per connection, so every request gets its own.
    return httpx.AsyncClient(limits=httpx.Limits(max_keepalive_connections=0))


async def test_a_connection_cut_mid_run_is_resumed_with_every_event_once(agent_service_url: str) -> None:
    port = int(agent_service_url.rsplit(":", 1)[1])
    # Headers plus a few events: the cut lands inside the run, almost surely inside an event.
    proxy = FaultProxy("127.0.0.1", port, faults=[Fault(b"POST /api/v1/agent/execute", after_bytes=1500)])
    reconnects: list[RetryEvent] = []
    async with proxy.running() as proxy_url, one_connection_per_request() as http:
        client = AgentServiceClient(proxy_url, API_KEY, http_client=http, config=QUICK, on_reconnect=reconnects.append)
        async with client.execute_agent(ask("what is 123*456?")) as stream:
            events = [event async for event in stream]
        assert proxy.faults_applied == 1
        assert stream.reconnects == 1 == len(reconnects)
        assert any(line.startswith(b"GET /api/v1/agent/sessions/") for line in proxy.request_lines)
        assert_contiguous([event.seq for event in events])
        assert events[-1].type is EventType.COMPLETE

        # What the consumer saw is exactly the session's log.
        async with AgentServiceClient(agent_service_url, API_KEY) as direct:
            log = direct.stream_events(stream.session_id)
            async with log:
                assert [e.model_dump() async for e in log] == [e.model_dump() for e in events]


async def test_a_stalled_connection_is_detected_by_the_idle_timeout_and_resumed(agent_service_url: str) -> None:
    port = int(agent_service_url.rsplit(":", 1)[1])
    proxy = FaultProxy("127.0.0.1", port, faults=[Fault(b"POST /api/v1/agent/execute", after_bytes=1500, stall=True)])
    # Heartbeats come every 0.2 s here, so 1 s of silence means the connection is dead.
    config = AgentClientConfig(read_timeout=1.0, reconnect_delays=(0.01, 0.02, 0.04))
    async with proxy.running() as proxy_url, one_connection_per_request() as http:
        client = AgentServiceClient(proxy_url, API_KEY, http_client=http, config=config)
        async with client.execute_agent(ask("what is 99*3?")) as stream:
            events = [event async for event in stream]
    assert proxy.faults_applied == 1 and stream.reconnects == 1
    assert_contiguous([event.seq for event in events])
    assert "297" in CompleteData.model_validate(events[-1].data).answer


async def test_a_cut_before_the_first_event_retries_the_execute_and_joins_the_same_run(
    agent_service_url: str,
) -> None:
    port = int(agent_service_url.rsplit(":", 1)[1])
    # Only the response headers get through: the run started, the client saw none of it.
    proxy = FaultProxy("127.0.0.1", port, faults=[Fault(b"POST /api/v1/agent/execute", after_bytes=60)])
    async with proxy.running() as proxy_url, one_connection_per_request() as http:
        client = AgentServiceClient(proxy_url, API_KEY, http_client=http, config=QUICK)
        async with client.execute_agent(ask("what is 2*21?")) as stream:
            events = [event async for event in stream]
    assert stream.retries == 1 and stream.reconnects == 0
    assert sum(line.startswith(b"POST /api/v1/agent/execute") for line in proxy.request_lines) == 2
    assert events[0].seq == 1 and events[-1].type is EventType.COMPLETE
    assert_contiguous([event.seq for event in events])
    async with AgentServiceClient(agent_service_url, API_KEY) as direct:
        # One run only: the retry joined it through the Idempotency-Key.
        assert (await direct.get_session_status(stream.session_id)).last_seq == events[-1].seq


async def test_a_service_that_is_down_is_retried_then_reported() -> None:
    retried: list[RetryEvent] = []
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    async with AgentServiceClient(url, API_KEY, config=QUICK, on_retry=retried.append) as client:
        stream = client.execute_agent(ask("hello"))
        with pytest.raises(AgentConnectError) as info:
            async with stream:
                pass
    assert stream.retries == 3 and [e.delay for e in retried] == [0.01, 0.02, 0.04]
    assert len({e.error.__class__ for e in retried}) == 1
    assert info.value.retryable and "reached" in info.value.user_message
