"""``/mcp``: the caller first, then the SDK's Streamable HTTP transport.

Every request is authenticated as every other door's is (``X-API-Key`` or an access token, resolved
to a ``Caller`` by the service's ``CallerResolver``) and needs the ``mcp`` permission; a request
that fails is answered in the service's own error format (401, 403) before the SDK reads it. The
caller is handed to the SDK as its authenticated user, which binds the request state of a
2026-07-28 question to the caller it was asked of; and to the ``ask`` tool, which acts for it
(``access``: whom it may act for, who owns what it starts). The transport keeps no MCP sessions
(2025-11-25 clients too are served request by request): any replica or worker answers any request.
"""

from __future__ import annotations

import contextvars
from contextlib import AsyncExitStack
from typing import Any

from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.lowlevel import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.datastructures import Headers
from starlette.types import Receive, Scope, Send

from agent_service.access.caller import Caller, Permission
from agent_service.access.resolver import CallerResolver
from agent_service.mcp_server.door import AgentDoor
from agent_service.settings import AgentServiceSettings

NAME = "taskforce-agent-service"
_caller: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("mcp_door_caller", default=None)


class MCPEndpoint:
    """The ASGI app of ``/mcp``."""

    def __init__(self, resolver: CallerResolver, manager: StreamableHTTPSessionManager) -> None:
        self._resolver = resolver
        self._manager = manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        scheme, _, token = headers.get("authorization", "").partition(" ")
        caller = await self._resolver.resolve(
            api_key=headers.get("x-api-key"), bearer=token.strip() if scheme.lower() == "bearer" and token else None,
        )
        caller.require(Permission.MCP)
        user = AuthenticatedUser(AccessToken(
            token="", client_id=caller.principal, scopes=[], subject=caller.user_id,
            claims={"org": caller.org_id} if caller.org_id else None,
        ))
        scope["user"] = user
        marks = (_caller.set(caller), auth_context_var.set(user))
        try:
            await self._manager.handle_request(scope, receive, send)
        finally:
            auth_context_var.reset(marks[1])
            _caller.reset(marks[0])


def _server(door: AgentDoor, settings: AgentServiceSettings) -> Server[Any]:
    async def call_tool(ctx: Any, params: Any) -> Any:
        caller = _caller.get()
        assert caller is not None, "the endpoint resolves the caller of every request"
        return await door.call_tool(ctx, params, caller)

    server: Server[Any] = Server(
        NAME, version="1.0", title="TaskForce Agent Service",
        instructions="Ask the agent with the ask tool; it may ask you a question before it answers.",
        on_list_tools=door.list_tools, on_call_tool=call_tool, get_tool_input_schema=door.input_schema,
    )
    # A question's request state is sealed for this service and the caller it was asked of; replicas
    # share AGENT_SERVICE_MCP_SERVER_STATE_KEYS so that the answer may reach any of them.
    keys = [key.encode() for key in settings.mcp_server_state_keys]
    security = RequestStateSecurity(keys=keys) if keys else RequestStateSecurity.ephemeral()
    server.middleware.append(RequestStateBoundary(security, default_audience=NAME))
    return server


async def build_endpoint(
    stack: AsyncExitStack, settings: AgentServiceSettings, door: AgentDoor, resolver: CallerResolver,
) -> MCPEndpoint:
    """The door's SDK server and its session manager, running until the service stops."""
    manager = StreamableHTTPSessionManager(app=_server(door, settings), json_response=False, stateless=True)
    await stack.enter_async_context(manager.run())
    return MCPEndpoint(resolver, manager)
