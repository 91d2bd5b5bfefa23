"""The MessageRouter: AGENT or DIRECT for each chat message.

A decision is pure computation on its inputs (the text, who sends it, whether the conversation has
an open agent session, whether the agent is available): no I/O, patterns compiled once, so it
stays well under a millisecond. The circuit breaker is not owned here; its state comes in as
``agent_available`` (a flag or a callable, read only when the agent is actually wanted).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram

from conversation_service.routing.schemas import RouteDecision, RouteReason, RouteTarget
from conversation_service.settings.routing import RoutingSettings

logger = logging.getLogger(__name__)

AgentAvailability = bool | Callable[[], bool]


def _keyword_pattern(keywords: list[str]) -> re.Pattern[str] | None:
    if not keywords:
        return None
    # Longest first so "analyze file" wins over a shorter overlapping entry; whole words only
    # ("research" does not contain the keyword "search"); any run of spaces between words.
    parts = [
        r"\s+".join(re.escape(word) for word in kw.split()) for kw in sorted(keywords, key=len, reverse=True)
    ]
    return re.compile(r"(?<!\w)(?:" + "|".join(parts) + r")(?!\w)", re.IGNORECASE)


def _command_pattern(commands: list[str]) -> re.Pattern[str] | None:
    if not commands:
        return None
    alternatives = "|".join(re.escape(c) for c in sorted(commands, key=len, reverse=True))
    # The command must stand alone ("/agents" is not "/agent"); separators after it are dropped too.
    return re.compile(r"\A\s*(?:" + alternatives + r")(?![\w-])[\s:,;.\-]*", re.IGNORECASE)


class MessageRouter:
    def __init__(self, settings: RoutingSettings, *, registry: CollectorRegistry | None = None,
                 agent_names: frozenset[str] = frozenset()) -> None:
        self.settings = settings
        # The A2A agents a user may name after the command (``/agent research ...``).
        self._agent_names = agent_names
        self._keywords = _keyword_pattern(settings.keywords)
        self._command = _command_pattern(settings.commands)
        self._disabled_orgs = frozenset(settings.disabled_orgs)
        self._enabled_orgs = frozenset(settings.enabled_orgs)
        self._disabled_users = frozenset(settings.disabled_users)
        self._enabled_users = frozenset(settings.enabled_users)
        self._decisions: Counter | None = None
        self._latency: Histogram | None = None
        if registry is not None:
            self._decisions = Counter(
                "conversation_routing_decisions",
                "Routing decisions by target and reason",
                ["target", "reason"],
                registry=registry,
            )
            self._latency = Histogram(
                "conversation_routing_decision_seconds",
                "Time to take one routing decision",
                buckets=(0.00001, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.005),
                registry=registry,
            )
            # Every combination shows from the start (as 0), so rates and alerts need no special case.
            for target, reason in _POSSIBLE:
                self._decisions.labels(target.value, reason.value)

    def strip_command(self, text: str) -> tuple[bool, str]:
        """``(True, rest)`` when the message starts with /agent or @agent, else ``(False, text)``."""
        if self._command is not None:
            match = self._command.match(text)
            if match is not None:
                return True, text[match.end() :]
        return False, text

    def parse(self, text: str) -> tuple[bool, str | None, str]:
        """``(explicit, agent, rest)``: whether the message starts with /agent or @agent, the A2A agent
        named right after it (None: none), and the text to send on without either."""
        explicit, rest = self.strip_command(text)
        if explicit and self._agent_names:
            word, _, after = rest.partition(" ")
            name = word.rstrip(":,;").lower()
            if name in self._agent_names:
                return True, name, after.lstrip()
        return explicit, None, rest

    def mentions_intent(self, text: str) -> bool:
        return (
            self._keywords is not None
            and self._keywords.search(text, 0, self.settings.scan_chars) is not None
        )

    def route(
        self,
        text: str,
        *,
        user_id: str | None = None,
        org_id: str | None = None,
        has_active_session: bool = False,
        agent_available: AgentAvailability = True,
    ) -> RouteDecision:
        started = time.perf_counter()
        decision = self._decide(text, user_id, org_id, has_active_session, agent_available)
        if self._latency is not None:
            self._latency.observe(time.perf_counter() - started)
        if self._decisions is not None:
            self._decisions.labels(decision.target.value, decision.reason.value).inc()
        # Ids and outcome only: the message text never reaches the logs.
        logger.info(
            "routing decision",
            extra={
                "route_target": decision.target.value,
                "route_reason": decision.reason.value,
                "route_explicit": decision.explicit,
                "user_id": user_id,
                "org_id": org_id,
            },
        )
        return decision

    def _decide(
        self,
        text: str,
        user_id: str | None,
        org_id: str | None,
        has_active_session: bool,
        agent_available: AgentAvailability,
    ) -> RouteDecision:
        explicit, agent, message = self.parse(text)
        s = self.settings

        def direct(reason: RouteReason, notice: str | None = None) -> RouteDecision:
            return RouteDecision(
                target=RouteTarget.DIRECT, reason=reason, message=message, notice=notice, explicit=explicit,
                agent=agent,
            )

        # A user who typed /agent is told why the agent did not answer; others see nothing.
        refused = s.disabled_notice if explicit else None
        if not s.enabled:
            return direct(RouteReason.ROUTING_DISABLED, refused)
        if org_id in self._disabled_orgs or (self._enabled_orgs and org_id not in self._enabled_orgs):
            return direct(RouteReason.ORG_DISABLED, refused)
        if user_id in self._disabled_users or (self._enabled_users and user_id not in self._enabled_users):
            return direct(RouteReason.USER_DISABLED, refused)

        if explicit:
            wanted = RouteReason.EXPLICIT_COMMAND
        elif has_active_session:
            wanted = RouteReason.ACTIVE_SESSION
        elif self.mentions_intent(message):
            wanted = RouteReason.INTENT_KEYWORD
        else:
            return direct(RouteReason.DEFAULT)

        available = agent_available() if callable(agent_available) else agent_available
        if not available:
            return direct(RouteReason.AGENT_UNAVAILABLE, s.fallback_notice)
        return RouteDecision(target=RouteTarget.AGENT, reason=wanted, message=message, explicit=explicit, agent=agent)


_WANTED = (RouteReason.EXPLICIT_COMMAND, RouteReason.ACTIVE_SESSION, RouteReason.INTENT_KEYWORD)
# Every decision ``route`` can take (PENDING_QUESTION is the dispatcher's, never the router's).
_POSSIBLE = [(RouteTarget.AGENT, reason) for reason in _WANTED] + [
    (RouteTarget.DIRECT, reason) for reason in RouteReason if reason not in (*_WANTED, RouteReason.PENDING_QUESTION)
]
