"""The ``/mcp`` route as the app declares it, before the lifespan has built the endpoint: it hands
each request to ``AgentState.mcp_door`` (the SDK is imported only when the door is on)."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import Receive, Scope, Send


class MCPRoute:
    """An ASGI app (not a request handler): the SDK's transport answers GET, POST and DELETE itself."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = scope["app"].state.agent.mcp_door
        if endpoint is None:
            raise HTTPException(404, "the MCP server is off (AGENT_SERVICE_MCP_SERVER_ENABLED)")
        await endpoint(scope, receive, send)
