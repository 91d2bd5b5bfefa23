"""Tracing is chosen once, at start-up, from the standard variables: off, nothing is added (no
middleware, no wrapped client, provider or engine); on, the SDK's resource and sampler follow the
OTEL_* variables. The traces themselves: tests/integration/tracing/test_traces.py."""

from __future__ import annotations

import httpx
import pytest

from agent_service.app import create_app as create_agent_app
from agent_service.settings import AgentServiceSettings
from conversation_service.app import create_app as create_chat_app
from conversation_service.settings import ConversationSettings
from shared.llm.builtin import BuiltinProvider
from shared.tracing import NO_TRACING, Tracing
from shared.tracing.asgi import TracingMiddleware
from shared.tracing.config import TracingConfig, build_tracing
from shared.tracing.core import links_to
from shared.tracing.genai import TracedProvider, traced_provider
from shared.tracing.http_client import TracedTransport, traced_transport

OTEL_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED",
                  "OTEL_TRACES_EXPORTER", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER",
                  "OTEL_TRACES_SAMPLER_ARG")


@pytest.fixture(autouse=True)
def no_otel_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(("env", "enabled"), [
    ({}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, False),
])
def test_tracing_is_on_only_with_an_otlp_endpoint(env: dict[str, str], enabled: bool) -> None:
    assert TracingConfig.from_env(env).enabled is enabled


def test_prompt_text_is_recorded_only_when_the_genai_switch_says_so() -> None:
    assert TracingConfig.from_env({}).capture_content is False
    assert TracingConfig.from_env({"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}).capture_content


def _middleware(app: object) -> set[type]:
    return {entry.cls for entry in app.user_middleware}  # type: ignore[attr-defined]


def test_unset_there_is_no_tracing_middleware_and_nothing_is_wrapped(tmp_path) -> None:
    agent = create_agent_app(AgentServiceSettings(database_url=f"sqlite+aiosqlite:///{tmp_path}/a.db"))
    chat = create_chat_app(ConversationSettings(conversation_database_url=f"sqlite+aiosqlite:///{tmp_path}/c.db"))
    for app in (agent, chat):
        assert TracingMiddleware not in _middleware(app)
        assert app.state.tracing is NO_TRACING
    off = build_tracing("agent_service", TracingConfig.from_env(), trust_client_context=True)
    assert off is NO_TRACING
    transport, provider, events = httpx.AsyncHTTPTransport(), BuiltinProvider(), object()
    assert traced_transport(off, transport) is transport and traced_provider(off, provider, "builtin") is provider
    assert off.counted(events, "stream") is events and off.traceparent() is None and off.exemplar() is None


async def test_set_both_apps_trace_with_the_standard_resource_and_sampler(
    tmp_path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    agent = create_agent_app(AgentServiceSettings(database_url=f"sqlite+aiosqlite:///{tmp_path}/a.db"))
    chat = create_chat_app(ConversationSettings(conversation_database_url=f"sqlite+aiosqlite:///{tmp_path}/c.db"))
    assert TracingMiddleware in _middleware(agent) and TracingMiddleware in _middleware(chat)

    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=staging")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")
    tracing = build_tracing("agent_service", TracingConfig.from_env(), trust_client_context=False)
    try:
        assert isinstance(tracing, Tracing)
        resource = tracing.tracer_provider.resource.attributes
        assert resource["service.name"] == "agent_service"  # the default, as OTEL_SERVICE_NAME is unset
        assert resource["deployment.environment.name"] == "staging"
        assert "TraceIdRatioBased{0.25}" in tracing.tracer_provider.sampler.get_description()
        assert isinstance(traced_transport(tracing, httpx.AsyncHTTPTransport()), TracedTransport)
        assert isinstance(traced_provider(tracing, BuiltinProvider(), "builtin"), TracedProvider)
    finally:
        await tracing.aclose(0.5)

    monkeypatch.setenv("OTEL_SERVICE_NAME", "chat-eu-1")
    named = build_tracing("conversation_service", TracingConfig.from_env(), trust_client_context=False)
    try:
        assert named.tracer_provider.resource.attributes["service.name"] == "chat-eu-1"
    finally:
        await named.aclose(0.5)


def test_a_stored_traceparent_becomes_a_link_and_a_malformed_one_is_left_out() -> None:
    trace_id, span_id = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    (link,) = links_to(f"00-{trace_id}-{span_id}-01", "not-a-traceparent", None, "00-" + "0" * 32 + "-" + "0" * 16 + "-01")
    assert format(link.context.trace_id, "032x") == trace_id and format(link.context.span_id, "016x") == span_id
