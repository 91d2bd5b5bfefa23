"""MessageRouter decisions: commands, keywords, active sessions, switches, fallback, metrics, speed."""

from __future__ import annotations

import logging
import time

import pytest
from prometheus_client import CollectorRegistry

from conversation_service.routing.router import MessageRouter
from conversation_service.routing.schemas import RouteReason, RouteTarget
from conversation_service.settings.routing import FALLBACK_NOTICE, RoutingSettings

AGENT, DIRECT = RouteTarget.AGENT, RouteTarget.DIRECT


def _router(**overrides) -> MessageRouter:
    return MessageRouter(RoutingSettings(**overrides))


@pytest.mark.parametrize(
    ("text", "stripped"),
    [
        ("/agent find the Q3 report", "find the Q3 report"),
        ("@agent find the Q3 report", "find the Q3 report"),
        ("  @Agent: find it", "find it"),
        ("/AGENT, hi", "hi"),
        ("@agent\n\nmulti\nline", "multi\nline"),
        ("/agent", ""),
    ],
)
def test_explicit_commands_go_to_the_agent_without_their_prefix(text: str, stripped: str) -> None:
    decision = _router().route(text, user_id="u1", org_id="o1")
    assert (decision.target, decision.reason, decision.message) == (
        AGENT,
        RouteReason.EXPLICIT_COMMAND,
        stripped,
    )
    assert decision.explicit and decision.notice is None


@pytest.mark.parametrize(
    "text", ["/agents are great", "@agentic workflows", "tell the /agent later", "email@agent.com"]
)
def test_lookalikes_are_not_commands(text: str) -> None:
    decision = _router(keywords=[]).route(text)
    assert (decision.target, decision.reason, decision.message, decision.explicit) == (
        DIRECT,
        RouteReason.DEFAULT,
        text,
        False,
    )


@pytest.mark.parametrize(
    "text",
    [
        "Can you search for flights to Lisbon?",
        "please ANALYZE   FILE report.csv",
        "run code: print(1)",
        "I want you to look up the weather",
        "calculate 17% of 2300",
    ],
)
def test_intent_keywords_go_to_the_agent(text: str) -> None:
    decision = _router().route(text)
    assert (decision.target, decision.reason, decision.message) == (AGENT, RouteReason.INTENT_KEYWORD, text)


@pytest.mark.parametrize(
    "text", ["I did some research", "hello there", "what is a searchlight?", "running late"]
)
def test_plain_chat_goes_direct(text: str) -> None:
    decision = _router().route(text)
    assert (decision.target, decision.reason, decision.notice) == (DIRECT, RouteReason.DEFAULT, None)


def test_keywords_are_configurable() -> None:
    router = _router(keywords="translate, summarise  document")
    assert router.route("translate this").reason is RouteReason.INTENT_KEYWORD
    assert router.route("please summarise document 4").reason is RouteReason.INTENT_KEYWORD
    assert router.route("search the web").reason is RouteReason.DEFAULT


def test_keywords_are_only_looked_for_near_the_start() -> None:
    router = _router(scan_chars=100)
    assert router.route("x" * 50 + " search").target is AGENT
    assert router.route("x " * 200 + " search").target is DIRECT


def test_an_active_session_keeps_the_conversation_with_the_agent() -> None:
    decision = _router().route("yes, the second one", has_active_session=True)
    assert (decision.target, decision.reason, decision.message) == (
        AGENT,
        RouteReason.ACTIVE_SESSION,
        "yes, the second one",
    )
    # An explicit command says more than the session does.
    assert _router().route("@agent go on", has_active_session=True).reason is RouteReason.EXPLICIT_COMMAND


def test_routing_disabled_sends_everything_direct() -> None:
    router = _router(enabled=False)
    for text, session in [("/agent search", False), ("search", False), ("ok", True)]:
        decision = router.route(text, has_active_session=session)
        assert (decision.target, decision.reason) == (DIRECT, RouteReason.ROUTING_DISABLED)
    # Whoever typed /agent is told why it did not happen, and the command is not sent to the LLM.
    explicit = router.route("/agent search")
    assert explicit.message == "search" and explicit.notice is not None
    assert router.route("search").notice is None


def test_switch_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_ROUTING_ENABLED", "false")
    monkeypatch.setenv("AGENT_ROUTING_KEYWORDS", "Search, run  code,,")
    monkeypatch.setenv("AGENT_ROUTING_DISABLED_ORGS", "acme, globex")
    monkeypatch.setenv("AGENT_ROUTING_ENABLED_USERS", "u1")
    settings = RoutingSettings()
    assert settings.enabled is False
    assert settings.keywords == ["search", "run code"]
    assert settings.disabled_orgs == ["acme", "globex"]
    assert settings.enabled_users == ["u1"]


def test_per_organisation_and_per_user_switches() -> None:
    router = _router(disabled_orgs="acme", disabled_users="u-off")
    assert router.route("search", org_id="acme", user_id="u1").reason is RouteReason.ORG_DISABLED
    assert router.route("search", org_id="other", user_id="u-off").reason is RouteReason.USER_DISABLED
    assert router.route("search", org_id="other", user_id="u1").target is AGENT

    pilots = _router(enabled_orgs="pilot", enabled_users="u1,u2")
    assert pilots.route("search", org_id="pilot", user_id="u1").target is AGENT
    assert pilots.route("search", org_id="other", user_id="u1").reason is RouteReason.ORG_DISABLED
    assert pilots.route("search", org_id=None, user_id="u1").reason is RouteReason.ORG_DISABLED
    assert pilots.route("search", org_id="pilot", user_id="u3").reason is RouteReason.USER_DISABLED
    # A disabled user stays disabled inside an open agent session.
    assert router.route("ok", user_id="u-off", has_active_session=True).target is DIRECT


def test_unavailable_agent_falls_back_with_a_notice() -> None:
    router = _router()
    for text, session in [("/agent search", False), ("search", False), ("and then?", True)]:
        decision = router.route(text, has_active_session=session, agent_available=False)
        assert (decision.target, decision.reason, decision.notice) == (
            DIRECT,
            RouteReason.AGENT_UNAVAILABLE,
            FALLBACK_NOTICE,
        )
    assert router.route("/agent search", agent_available=False).message == "search"


def test_availability_is_read_only_when_the_agent_is_wanted() -> None:
    reads: list[int] = []

    def breaker_closed() -> bool:
        reads.append(1)
        return True

    router = _router()
    assert router.route("hello", agent_available=breaker_closed).reason is RouteReason.DEFAULT
    assert _router(enabled=False).route("search", agent_available=breaker_closed).target is DIRECT
    assert reads == []
    assert router.route("search", agent_available=breaker_closed).target is AGENT
    assert reads == [1]


def test_every_decision_is_counted_and_logged_without_the_text(caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry()
    router = MessageRouter(RoutingSettings(disabled_orgs="acme"), registry=registry)
    secret = "search my diary entry about the surprise party"
    with caplog.at_level(logging.INFO, logger="conversation_service.routing.router"):
        router.route(secret, user_id="u1", org_id="o1")
        router.route(secret, user_id="u1", org_id="o1", agent_available=False)
        router.route("hi", user_id="u1", org_id="acme")
        router.route("hi", user_id="u1", org_id="o1")
        router.route("hi", user_id="u1", org_id="o1")

    def count(target: str, reason: str) -> float | None:
        return registry.get_sample_value(
            "conversation_routing_decisions_total", {"target": target, "reason": reason}
        )

    assert count("AGENT", "intent_keyword") == 1
    assert count("DIRECT", "agent_unavailable") == 1
    assert count("DIRECT", "org_disabled") == 1
    assert count("DIRECT", "default") == 2
    assert count("AGENT", "explicit_command") == 0  # present before it ever happens
    assert registry.get_sample_value("conversation_routing_decision_seconds_count") == 5

    records = [r for r in caplog.records if r.getMessage() == "routing decision"]
    assert [(r.route_target, r.route_reason) for r in records] == [  # type: ignore[attr-defined]
        ("AGENT", "intent_keyword"),
        ("DIRECT", "agent_unavailable"),
        ("DIRECT", "org_disabled"),
        ("DIRECT", "default"),
        ("DIRECT", "default"),
    ]
    assert all(r.user_id == "u1" for r in records)  # type: ignore[attr-defined]
    assert "diary" not in caplog.text


@pytest.mark.parametrize(
    "env", [{"AGENT_ROUTING_COMMANDS": "/agent please"}, {"AGENT_ROUTING_KEYWORDS": "x" * 65}]
)
def test_invalid_settings_are_refused(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValueError):
        RoutingSettings()


def test_decisions_take_well_under_a_millisecond() -> None:
    # CPU time of this thread, not wall time: the cost of a decision itself, unaffected by other
    # processes that happen to share the machine while the test runs.
    router = MessageRouter(RoutingSettings(), registry=CollectorRegistry())
    texts = [
        "hello, how are you today?",
        "/agent find the quarterly numbers",
        "Could you search for the latest release notes of the database driver?",
        "word " * 40_000,  # a 200 k-character paste
        "ok",
    ]
    for text in texts:  # warm up
        router.route(text, user_id="u1", org_id="o1")
    timings: list[float] = []
    for i in range(5000):
        text = texts[i % len(texts)]
        started = time.thread_time()
        router.route(
            text, user_id="u1", org_id="o1", has_active_session=i % 7 == 0, agent_available=i % 11 != 0
        )
        timings.append(time.thread_time() - started)
    timings.sort()
    p99 = timings[int(len(timings) * 0.99)]
    assert p99 < 0.001, f"p99 {p99 * 1e6:.0f} µs"


@pytest.mark.parametrize(
    ("text", "agent", "message"),
    [
        ("/agent research find the Q3 report", "research", "find the Q3 report"),
        ("@agent Research: find it", "research", "find it"),
        ("/agent researcher find it", None, "researcher find it"),  # not a configured name
        ("/agent find the Q3 report", None, "find the Q3 report"),
        ("research find it", None, "research find it"),  # a name counts only after the command
    ],
)
def test_a_configured_a2a_agent_is_named_after_the_command(text: str, agent: str | None, message: str) -> None:
    router = MessageRouter(RoutingSettings(), agent_names=frozenset({"research", "planner"}))
    decision = router.route(text)
    assert (decision.agent, decision.message) == (agent, message)
    assert router.parse(text) == (decision.explicit, agent, message)
