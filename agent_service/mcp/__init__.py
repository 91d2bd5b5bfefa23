"""Tools from MCP servers: the organisation's own systems as the agent's tools.

``config`` (the servers of the deployment, secrets by reference) -> ``transport`` (the SDK's
stdio and Streamable HTTP clients) -> ``connection`` (one server kept connected, restarted with
back-off, a breaker on its calls, its questions to the user) -> ``tools`` (a server's tool as the
agent's ``Tool``) and ``results`` (its results as the model reads them) -> ``service`` (every
server, the tools on offer, the profiles completed with them). The protocol itself is the
official SDK's (``mcp``); nothing here writes JSON-RPC.
"""
