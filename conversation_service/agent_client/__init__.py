"""The SDK the conversation service uses to call the Agent Service.

``AgentServiceClient`` runs agents and streams their events (resuming broken streams), reads a
session's status, cancels runs and checks health; all errors derive from ``AgentServiceError``
(the tree is drawn in :mod:`conversation_service.agent_client.errors`).
"""

from conversation_service.agent_client.client import AgentServiceClient
from conversation_service.agent_client.config import AgentClientConfig
from conversation_service.agent_client.errors import (
    AgentAuthError,
    AgentBadRequestError,
    AgentConflictError,
    AgentConnectError,
    AgentGoneError,
    AgentHTTPError,
    AgentNotFoundError,
    AgentPayloadTooLargeError,
    AgentProtocolError,
    AgentRequestTimeoutError,
    AgentServerError,
    AgentServiceError,
    AgentStreamError,
    AgentTimeoutError,
    AgentTransportError,
    AgentUnavailableError,
)
from conversation_service.agent_client.retry import RetryEvent, RetryHook
from conversation_service.agent_client.stream import AgentEventStream

__all__ = [
    "AgentAuthError",
    "AgentBadRequestError",
    "AgentClientConfig",
    "AgentConflictError",
    "AgentConnectError",
    "AgentEventStream",
    "AgentGoneError",
    "AgentHTTPError",
    "AgentNotFoundError",
    "AgentPayloadTooLargeError",
    "AgentProtocolError",
    "AgentRequestTimeoutError",
    "AgentServerError",
    "AgentServiceClient",
    "AgentServiceError",
    "AgentStreamError",
    "AgentTimeoutError",
    "AgentTransportError",
    "AgentUnavailableError",
    "RetryEvent",
    "RetryHook",
]
