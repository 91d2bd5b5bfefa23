"""Which interface of an A2A agent's card the chat uses, and the cards it refuses (and why)."""

from __future__ import annotations

import pytest

from conversation_service.a2a_agents.card import A2AAgentIncompatible, read_card
from conversation_service.settings.a2a_agents import A2AAgentConfig

CONFIG = A2AAgentConfig(name="research", card_url="https://r.example/.well-known/agent-card.json")


def card(*interfaces: tuple[str, str, str], streaming: bool = True, **extra) -> dict:
    return {
        "name": "Research Agent", "capabilities": {"streaming": streaming},
        "supportedInterfaces": [{"url": url, "protocolBinding": binding, "protocolVersion": version}
                                for url, binding, version in interfaces],
        **extra,
    }


def test_json_rpc_is_taken_first_and_a_preferred_binding_wins() -> None:
    offered = card(("https://r.example/rest/", "HTTP+JSON", "1.0"), ("https://r.example/rpc", "JSONRPC", "1.0"),
                   ("r.example:50051", "GRPC", "1.0"))
    resolved = read_card(CONFIG, offered)
    assert (resolved.name, resolved.url, resolved.binding) == ("Research Agent", "https://r.example/rpc", "JSONRPC")
    rest = read_card(CONFIG.model_copy(update={"binding": "HTTP+JSON"}), offered)
    assert (rest.url, rest.binding) == ("https://r.example/rest", "HTTP+JSON")


def test_a_1_x_interface_is_taken_beside_0_3_ones() -> None:
    offered = card(("https://r.example/v03", "JSONRPC", "0.3"), ("https://r.example/v1", "HTTP+JSON", "1.1"))
    assert read_card(CONFIG, offered).url == "https://r.example/v1"


@pytest.mark.parametrize(
    ("offered", "says"),
    [
        (card(("https://r.example/rpc", "JSONRPC", "0.3"), ("https://r.example/rest", "HTTP+JSON", "0.3")),
         "declares only protocol 0.3 in its card; the chat speaks A2A 1.0"),
        # A card of the 0.3 format: url, preferredTransport, protocolVersion; no supportedInterfaces.
        ({"name": "old", "url": "https://r.example/rpc", "preferredTransport": "JSONRPC", "protocolVersion": "0.3.0",
          "capabilities": {"streaming": True}}, "declares only protocol 0.3.0"),
        (card(("r.example:50051", "GRPC", "1.0")), "no A2A 1.x interface over JSON-RPC or HTTP+JSON (offered: GRPC 1.0)"),
        (card(("https://r.example/rpc", "JSONRPC", "1.0"), streaming=False), "does not stream"),
    ],
)
def test_a_card_the_chat_cannot_use_is_refused_saying_why(offered: dict, says: str) -> None:
    with pytest.raises(A2AAgentIncompatible) as caught:
        read_card(CONFIG, offered)
    assert says in str(caught.value) and "research" in str(caught.value)
    assert "research" in caught.value.user_message and not caught.value.retryable
