"""An A2A agent's card: fetched on first use, kept for a while, read for where and how to talk to it.

Of the card's ``supportedInterfaces`` (spec 4.4.6) the chat takes the first A2A 1.x interface of a
binding it speaks (JSON-RPC, then HTTP+JSON, unless the agent's configuration prefers one) and needs
``capabilities.streaming``. A card that offers A2A 0.3 only (``protocolVersion`` 0.3 on every
interface, or a 0.3 card with ``url`` and ``preferredTransport``) is refused with a sentence saying
so: 0.3's wire format differs (method names, enums, the kind of each event), and the chat speaks 1.0.

The card is kept for ``A2A_CARD_CACHE_S`` or its own ``Cache-Control: max-age`` if shorter; one fetch
at a time per agent (callers wait for it), and a failed fetch is not kept.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson

from conversation_service.agent_client.errors import (
    AgentProtocolError,
    error_for_status,
    translating_transport_errors,
)
from conversation_service.settings.a2a_agents import A2AAgentConfig

BINDINGS = ("JSONRPC", "HTTP+JSON")
MAX_CARD_BYTES = 256 * 1024
_MAX_AGE = re.compile(r"max-age=(\d+)")


class A2AAgentIncompatible(AgentProtocolError):
    """The agent's card shows that the chat cannot talk to it (its protocol version, no streaming,
    no binding the chat speaks). Trying again does not help; the operator has to change something."""

    def __init__(self, message: str, agent_label: str) -> None:
        super().__init__(message, user_message=f"The agent {agent_label} cannot be used from this chat "
                                               "(its A2A version or interface is not supported).")


@dataclass(frozen=True, slots=True)
class ResolvedCard:
    name: str  # the agent's own name, from its card
    url: str  # the interface's URL
    binding: str  # JSONRPC or HTTP+JSON
    protocol_version: str


def read_card(config: A2AAgentConfig, card: Any) -> ResolvedCard:
    """The interface the chat uses, or ``A2AAgentIncompatible`` saying why there is none."""
    if not isinstance(card, dict):
        raise AgentProtocolError(f"the card of A2A agent {config.name!r} is not a JSON object")
    interfaces = [i for i in card.get("supportedInterfaces") or [] if isinstance(i, dict)]
    versions = {str(i.get("protocolVersion", "")) for i in interfaces}
    if not interfaces and isinstance(card.get("url"), str):
        versions = {str(card.get("protocolVersion", "0.3"))}  # a 0.3 card: url + preferredTransport
    speakable = [i for i in interfaces if _major(i.get("protocolVersion")) == "1"
                 and i.get("protocolBinding") in BINDINGS and _http_url(i.get("url"))]
    if not speakable:
        if versions and all(v.startswith("0.") for v in versions):
            raise A2AAgentIncompatible(
                f"A2A agent {config.name!r} declares only protocol {', '.join(sorted(versions))} in its card; "
                "the chat speaks A2A 1.0 (serve the agent with an A2A 1.0 SDK: a2a-sdk >= 1.0 serves both)",
                config.name)
        offered = ", ".join(f"{i.get('protocolBinding')} {i.get('protocolVersion')}" for i in interfaces) or "none"
        raise A2AAgentIncompatible(
            f"A2A agent {config.name!r} offers no A2A 1.x interface over JSON-RPC or HTTP+JSON (offered: {offered})",
            config.name)
    capabilities = card.get("capabilities") if isinstance(card.get("capabilities"), dict) else {}
    if capabilities.get("streaming") is not True:
        raise A2AAgentIncompatible(
            f"A2A agent {config.name!r} does not stream (capabilities.streaming is not true); the chat shows "
            "answers as they come and needs SendStreamingMessage", config.name)
    preferred = min(speakable, key=lambda i: (i["protocolBinding"] != config.binding,
                                                 BINDINGS.index(i["protocolBinding"])))
    name = card.get("name")
    return ResolvedCard(name if isinstance(name, str) and name else config.name, preferred["url"].rstrip("/"),
                        preferred["protocolBinding"], str(preferred["protocolVersion"]))


def _major(version: Any) -> str:
    return str(version or "").split(".")[0]


def _http_url(url: Any) -> bool:
    return isinstance(url, str) and urlsplit(url).scheme in ("http", "https") and bool(urlsplit(url).netloc)


class CardCache:
    """One agent's card, fetched when first needed and again once it is older than its lifetime."""

    def __init__(self, config: A2AAgentConfig, http: httpx.AsyncClient, *, max_age_s: float, timeout_s: float,
                 clock=time.monotonic) -> None:
        self._config = config
        self._http = http
        self._max_age_s = max_age_s
        self._timeout_s = timeout_s
        self._clock = clock
        self._card: ResolvedCard | None = None
        self._expires = 0.0
        self._lock = asyncio.Lock()

    async def get(self) -> ResolvedCard:
        if self._card is not None and self._clock() < self._expires:
            return self._card
        async with self._lock:
            if self._card is None or self._clock() >= self._expires:
                self._card, lifetime = await self._fetch()
                self._expires = self._clock() + lifetime
            return self._card

    def forget(self) -> None:
        """Fetch the card again next time (the interface it named stopped answering as one)."""
        self._expires = 0.0

    async def _fetch(self) -> tuple[ResolvedCard, float]:
        headers = {"Accept": "application/json", **self._config.auth_headers()}
        async with asyncio.timeout(self._timeout_s):
            with translating_transport_errors():
                response = await self._http.get(self._config.card_url, headers=headers)
        body = response.content[:MAX_CARD_BYTES + 1]
        if response.status_code != 200:
            raise error_for_status(response.status_code, body[:4096])
        if len(body) > MAX_CARD_BYTES:
            raise AgentProtocolError(f"the card of A2A agent {self._config.name!r} exceeds {MAX_CARD_BYTES} bytes")
        try:
            card = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise AgentProtocolError(f"the card of A2A agent {self._config.name!r} is not JSON") from exc
        max_age = _MAX_AGE.search(response.headers.get("cache-control", ""))
        lifetime = min(self._max_age_s, float(max_age.group(1))) if max_age else self._max_age_s
        return read_card(self._config, card), lifetime
