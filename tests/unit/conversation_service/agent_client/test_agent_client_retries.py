"""Retries by error category (respx): which statuses are repeated, how often, after which delays."""

from __future__ import annotations

import logging

import httpx
import pytest
import respx

from conversation_service.agent_client import (
    AgentAuthError,
    AgentBadRequestError,
    AgentClientConfig,
    AgentConflictError,
    AgentConnectError,
    AgentNotFoundError,
    AgentProtocolError,
    AgentRequestTimeoutError,
    AgentServerError,
    AgentServiceClient,
    AgentUnavailableError,
    RetryEvent,
)
from shared.logging import request_id_var
from shared.protocol import EventType, ExecuteRequest, SessionStatus, UserContext
from tests.unit.conversation_service.agent_client.sse_support import (
    API_KEY,
    BASE_URL,
    FAST,
    SESSION_ID,
    RecordingSleep,
    sse_events,
)

EXECUTE_URL = f"{BASE_URL}/api/v1/agent/execute"
STATUS_URL = f"{BASE_URL}/api/v1/agent/sessions/{SESSION_ID}"
SSE_HEADERS = {"content-type": "text/event-stream"}


def request() -> ExecuteRequest:
    return ExecuteRequest(message="find the report", user_context=UserContext(user_id="u1"))


def ok_stream() -> httpx.Response:
    return httpx.Response(200, headers=SSE_HEADERS, content=sse_events(1, 3, terminal=EventType.COMPLETE))


def status(code: int) -> httpx.Response:
    return httpx.Response(code, json={"error": f"E{code}", "detail": "d"})


def status_body(last_seq: int = 3, state: str = "COMPLETED") -> dict:
    return {
        "session_id": SESSION_ID,
        "profile_name": "default",
        "status": state,
        "last_seq": last_seq,
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    }


async def consume(client: AgentServiceClient, **kwargs) -> tuple[list[int], object]:
    async with client.execute_agent(request(), **kwargs) as stream:
        seqs = [event.seq async for event in stream]
    return seqs, stream


@respx.mock
async def test_503_is_retried_after_1_2_4_seconds_with_one_idempotency_key() -> None:
    route = respx.post(EXECUTE_URL).mock(side_effect=[status(503), status(503), status(503), ok_stream()])
    sleep = RecordingSleep()
    hooked: list[RetryEvent] = []
    async with AgentServiceClient(BASE_URL, API_KEY, sleep=sleep, on_retry=hooked.append) as client:
        seqs, stream = await consume(client)
    assert seqs == [1, 2, 3]
    assert sleep.delays == [1.0, 2.0, 4.0]  # the default schedule
    assert route.call_count == 4
    keys = {call.request.headers["Idempotency-Key"] for call in route.calls}
    assert keys == {stream.idempotency_key}
    assert all(call.request.headers["X-API-Key"] == API_KEY for call in route.calls)
    assert stream.retries == 3 and stream.reconnects == 0
    assert [(e.operation, e.attempt, e.delay) for e in hooked] == [
        ("execute", 2, 1.0),
        ("execute", 3, 2.0),
        ("execute", 4, 4.0),
    ]
    assert all(isinstance(e.error, AgentUnavailableError) for e in hooked)


@respx.mock
async def test_a_given_idempotency_key_is_sent_on_every_try(client: AgentServiceClient) -> None:
    route = respx.post(EXECUTE_URL).mock(side_effect=[httpx.ConnectError("refused"), ok_stream()])
    seqs, stream = await consume(client, idempotency_key="msg-42")
    assert seqs == [1, 2, 3]
    assert [call.request.headers["Idempotency-Key"] for call in route.calls] == ["msg-42", "msg-42"]
    assert stream.idempotency_key == "msg-42"


@respx.mock
async def test_503_gives_up_after_three_retries(client: AgentServiceClient, recording_sleep: RecordingSleep) -> None:
    route = respx.post(EXECUTE_URL).mock(return_value=status(503))
    with pytest.raises(AgentUnavailableError) as info:
        await consume(client)
    assert route.call_count == 4
    assert recording_sleep.delays == list(FAST.retry_delays)
    assert info.value.retryable and info.value.status_code == 503
    assert "unavailable" in info.value.user_message


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (408, AgentRequestTimeoutError),
        (400, AgentBadRequestError),
        (422, AgentBadRequestError),
        (401, AgentAuthError),
        (409, AgentConflictError),
    ],
)
@respx.mock
async def test_client_errors_are_not_retried(
    client: AgentServiceClient, recording_sleep: RecordingSleep, code: int, cls: type
) -> None:
    route = respx.post(EXECUTE_URL).mock(return_value=status(code))
    with pytest.raises(cls) as info:
        await consume(client)
    assert route.call_count == 1
    assert recording_sleep.delays == []
    assert info.value.status_code == code and not info.value.retryable


@respx.mock
async def test_500_is_retried_once(client: AgentServiceClient, recording_sleep: RecordingSleep) -> None:
    route = respx.post(EXECUTE_URL).mock(return_value=status(500))
    with pytest.raises(AgentServerError):
        await consume(client)
    assert route.call_count == 2
    assert recording_sleep.delays == [FAST.retry_delays[0]]


@respx.mock
async def test_500_then_success(client: AgentServiceClient) -> None:
    respx.post(EXECUTE_URL).mock(side_effect=[status(500), ok_stream()])
    seqs, stream = await consume(client)
    assert seqs == [1, 2, 3] and stream.retries == 1


@respx.mock
async def test_503_retries_do_not_use_up_the_single_500_retry(client: AgentServiceClient) -> None:
    route = respx.post(EXECUTE_URL).mock(side_effect=[status(503), status(500), status(500), ok_stream()])
    with pytest.raises(AgentServerError):
        await consume(client)
    assert route.call_count == 3


@respx.mock
async def test_connection_errors_are_retried_like_503(client: AgentServiceClient, recording_sleep) -> None:
    route = respx.post(EXECUTE_URL).mock(side_effect=httpx.ConnectError("refused"))
    with pytest.raises(AgentConnectError) as info:
        await consume(client)
    assert route.call_count == 4
    assert len(recording_sleep.delays) == 3
    assert info.value.retryable


@respx.mock
async def test_real_sleep_follows_the_configured_tiny_delays() -> None:
    respx.post(EXECUTE_URL).mock(side_effect=[status(503), status(503), ok_stream()])
    hooked: list[RetryEvent] = []
    async with AgentServiceClient(BASE_URL, API_KEY, config=FAST, on_retry=hooked.append) as client:
        seqs, _ = await consume(client)
    assert seqs == [1, 2, 3]
    assert [e.delay for e in hooked] == [0.001, 0.002]


@respx.mock
async def test_the_api_key_never_appears_in_errors_or_logs(
    client: AgentServiceClient, caplog: pytest.LogCaptureFixture
) -> None:
    respx.post(EXECUTE_URL).mock(side_effect=[status(503), status(401)])
    caplog.set_level(logging.DEBUG)
    with pytest.raises(AgentAuthError) as info:
        await consume(client)
    texts = [str(info.value), repr(info.value), info.value.user_message, repr(client)]
    texts += [record.getMessage() + str(record.__dict__) for record in caplog.records]
    assert caplog.records, "the retry is logged"
    assert not any(API_KEY in text for text in texts)


@respx.mock
async def test_request_id_of_the_caller_is_propagated(client: AgentServiceClient) -> None:
    route = respx.get(STATUS_URL).mock(return_value=httpx.Response(200, json=status_body()))
    token = request_id_var.set("req-77")
    try:
        await client.get_session_status(SESSION_ID)
    finally:
        request_id_var.reset(token)
    assert route.calls.last.request.headers["X-Request-ID"] == "req-77"


@respx.mock
async def test_get_session_status_parses_and_retries(client: AgentServiceClient) -> None:
    route = respx.get(STATUS_URL).mock(side_effect=[status(503), httpx.Response(200, json=status_body(7, "ACTIVE"))])
    result = await client.get_session_status(SESSION_ID)
    assert result.status is SessionStatus.ACTIVE and result.last_seq == 7
    assert route.call_count == 2
    assert route.calls.last.request.headers["X-API-Key"] == API_KEY


@respx.mock
async def test_get_session_status_errors(client: AgentServiceClient) -> None:
    respx.get(STATUS_URL).mock(side_effect=[status(404), httpx.Response(200, json={"status": "nope"})])
    with pytest.raises(AgentNotFoundError):
        await client.get_session_status(SESSION_ID)
    with pytest.raises(AgentProtocolError):
        await client.get_session_status(SESSION_ID)


@respx.mock
async def test_session_ids_are_escaped_and_validated(client: AgentServiceClient) -> None:
    route = respx.get(f"{BASE_URL}/api/v1/agent/sessions/a%2Fb").mock(
        return_value=httpx.Response(200, json={**status_body(), "session_id": "a/b"})
    )
    assert (await client.get_session_status("a/b")).session_id == "a/b"
    assert route.called
    for bad in ("", "with space", "x" * 129, "line\nbreak"):
        with pytest.raises(ValueError):
            await client.get_session_status(bad)


@respx.mock
async def test_an_oversized_json_answer_is_refused(recording_sleep: RecordingSleep) -> None:
    config = AgentClientConfig(max_response_bytes=2048)
    respx.get(STATUS_URL).mock(return_value=httpx.Response(200, json={**status_body(), "pad": "x" * 5000}))
    async with AgentServiceClient(BASE_URL, API_KEY, config=config, sleep=recording_sleep) as client:
        with pytest.raises(AgentProtocolError):
            await client.get_session_status(SESSION_ID)


@respx.mock
async def test_cancel(client: AgentServiceClient) -> None:
    route = respx.post(f"{STATUS_URL}/cancel").mock(
        side_effect=[status(503), httpx.Response(200, json=status_body(4, "CANCELLED")), status(409)]
    )
    assert (await client.cancel(SESSION_ID)).status is SessionStatus.CANCELLED
    assert route.call_count == 2
    with pytest.raises(AgentConflictError):
        await client.cancel(SESSION_ID)
    assert route.call_count == 3


@respx.mock
async def test_health_is_tried_once(client: AgentServiceClient) -> None:
    route = respx.get(f"{BASE_URL}/health").mock(side_effect=[status(503), httpx.Response(200, json={"status": "ok"})])
    with pytest.raises(AgentUnavailableError):
        await client.health()
    assert await client.health() == {"status": "ok"}
    assert route.call_count == 2


async def test_an_injected_http_client_is_used_and_left_open() -> None:
    with respx.mock(base_url=BASE_URL) as mock:
        mock.get("/health").mock(return_value=httpx.Response(200, json={"status": "ok"}))
        http = httpx.AsyncClient()
        async with AgentServiceClient(BASE_URL + "/", API_KEY, http_client=http) as client:
            assert await client.health() == {"status": "ok"}
        assert not http.is_closed
        await http.aclose()


def test_constructor_validates_its_arguments() -> None:
    for url in ("ftp://x", "agent:8000", "http://x/?q=1"):
        with pytest.raises(ValueError):
            AgentServiceClient(url, API_KEY)
    for key in ("", "a\nb"):
        with pytest.raises(ValueError):
            AgentServiceClient(BASE_URL, key)


async def test_execute_validates_its_arguments(client: AgentServiceClient) -> None:
    with pytest.raises(TypeError):
        client.execute_agent({"message": "hi"})  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        client.execute_agent(request(), idempotency_key="has space")
    with pytest.raises(ValueError):
        client.stream_events(SESSION_ID, last_event_id=-1)
