from __future__ import annotations

import httpx
import pytest

from conversation_service.agent_client import errors as E
from conversation_service.agent_client.errors import error_for_status, translating_transport_errors


@pytest.mark.parametrize(
    ("status", "cls", "retryable"),
    [
        (400, E.AgentBadRequestError, False),
        (401, E.AgentAuthError, False),
        (403, E.AgentAuthError, False),
        (404, E.AgentNotFoundError, False),
        (408, E.AgentRequestTimeoutError, False),
        (409, E.AgentConflictError, False),
        (410, E.AgentGoneError, False),
        (413, E.AgentPayloadTooLargeError, False),
        (418, E.AgentHTTPError, False),
        (422, E.AgentBadRequestError, False),
        (429, E.AgentUnavailableError, True),
        (500, E.AgentServerError, True),
        (502, E.AgentServerError, True),
        (503, E.AgentUnavailableError, True),
        (504, E.AgentServerError, True),
    ],
)
def test_status_maps_to_its_error_class(status: int, cls: type, retryable: bool) -> None:
    err = error_for_status(status, b'{"error": "SomethingWrong", "detail": "explained"}', request_id="r-1")
    assert type(err) is cls
    assert isinstance(err, E.AgentHTTPError) and isinstance(err, E.AgentServiceError)
    assert err.status_code == status
    assert err.retryable is retryable
    assert err.error == "SomethingWrong"
    assert err.detail == "explained"
    assert err.request_id == "r-1"
    assert str(status) in str(err) and "explained" in str(err)
    assert err.user_message and "explained" not in err.user_message


def test_error_body_that_is_not_json_still_gives_the_status_error() -> None:
    err = error_for_status(503, b"<html>bad gateway</html>")
    assert isinstance(err, E.AgentUnavailableError)
    assert err.error is None and err.detail is None


def test_structured_detail_is_kept_and_the_message_is_capped() -> None:
    detail = [{"loc": ["body", "message"], "msg": "x" * 5000}]
    err = error_for_status(422, __import__("orjson").dumps({"detail": detail}))
    assert err.detail == detail
    assert len(str(err)) < 500


def test_408_tells_the_user_instead_of_retrying() -> None:
    err = error_for_status(408, b"")
    assert not err.retryable
    assert "too long" in err.user_message


@pytest.mark.parametrize(
    ("raised", "cls", "retryable"),
    [
        (httpx.ConnectError("refused"), E.AgentConnectError, True),
        (httpx.ConnectTimeout("slow"), E.AgentTimeoutError, True),
        (httpx.PoolTimeout("full"), E.AgentTimeoutError, True),
        (httpx.ReadTimeout("idle"), E.AgentTimeoutError, False),
        (httpx.WriteTimeout("slow"), E.AgentTimeoutError, False),
        (httpx.ReadError("reset"), E.AgentTransportError, True),
        (httpx.RemoteProtocolError("peer closed"), E.AgentTransportError, True),
    ],
)
def test_transport_errors_are_translated_in_one_place(raised: Exception, cls: type, retryable: bool) -> None:
    with pytest.raises(cls) as info, translating_transport_errors():
        raise raised
    assert type(info.value) is cls
    assert info.value.retryable is retryable
    assert info.value.__cause__ is raised


def test_non_transport_errors_pass_through_untranslated() -> None:
    with pytest.raises(KeyError), translating_transport_errors():
        raise KeyError("x")


def test_every_error_has_a_user_message_and_the_tree_has_one_root() -> None:
    classes = [obj for obj in vars(E).values() if isinstance(obj, type) and issubclass(obj, Exception)]
    assert len(classes) == 16
    for cls in classes:
        assert issubclass(cls, E.AgentServiceError)
        assert cls.user_message.endswith(".")


def test_retryable_can_be_set_per_instance() -> None:
    err = E.AgentStreamError("ended early", retryable=True)
    assert err.retryable and not E.AgentStreamError.retryable
