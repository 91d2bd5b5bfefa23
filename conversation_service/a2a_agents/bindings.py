"""The two A2A 1.0 bindings the chat speaks, as requests and the unwrapping of their answers.

Both carry the same operations (spec 9 and 11): ``SendStreamingMessage``, ``SubscribeToTask``,
``CancelTask``, ``GetTask``. JSON-RPC posts an envelope to the interface's URL and wraps every
answer (and every SSE event) in ``{"result"}`` or ``{"error"}``; HTTP+JSON has a path per operation
and says an error with the HTTP status and an AIP-193 body.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from conversation_service.a2a_agents.wire import http_error, jsonrpc_error

VERSION_HEADER = "A2A-Version"
PROTOCOL_VERSION = "1.0"

SEND_STREAM = "SendStreamingMessage"
SUBSCRIBE = "SubscribeToTask"
CANCEL = "CancelTask"
GET_TASK = "GetTask"


@dataclass(frozen=True, slots=True)
class Call:
    method: str
    url: str
    body: dict[str, Any] | None


class JsonRpcBinding:
    name = "JSONRPC"

    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, operation: str, params: dict[str, Any]) -> Call:
        return Call("POST", self.url, {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": operation,
                                       "params": params})

    @staticmethod
    def unwrap(payload: Any) -> Any:
        """The ``result`` of one answer or SSE event; its ``error`` raised as the chat's error."""
        if isinstance(payload, dict) and "error" in payload:
            raise jsonrpc_error(payload["error"])
        if not isinstance(payload, dict) or "result" not in payload:
            raise jsonrpc_error(None)
        return payload["result"]

    @staticmethod
    def error(status: int, body: Any):
        """A JSON-RPC error comes with 200; another status is the HTTP layer's (a proxy, the auth)."""
        if status == 200:
            return jsonrpc_error(body.get("error") if isinstance(body, dict) else None)
        return http_error(status, body)


class HttpJsonBinding:
    name = "HTTP+JSON"

    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, operation: str, params: dict[str, Any]) -> Call:
        if operation == SEND_STREAM:
            return Call("POST", f"{self.url}/message:stream", params)
        task = quote(params["id"], safe="")
        if operation == SUBSCRIBE:
            return Call("POST", f"{self.url}/tasks/{task}:subscribe", {})
        if operation == CANCEL:
            return Call("POST", f"{self.url}/tasks/{task}:cancel", {})
        return Call("GET", f"{self.url}/tasks/{task}", None)

    @staticmethod
    def unwrap(payload: Any) -> Any:
        return payload

    @staticmethod
    def error(status: int, body: Any):
        return http_error(status, body)


Binding = JsonRpcBinding | HttpJsonBinding


def binding_for(name: str, url: str) -> Binding:
    return JsonRpcBinding(url) if name == JsonRpcBinding.name else HttpJsonBinding(url)
