"""The Agent Service as an MCP server, at ``/mcp``: the same agent offered as one MCP tool, ``ask``.

An IDE or a desktop assistant calls ``ask`` with a message (and a profile, and a session to go on
with); the run's progress comes back as MCP progress notifications, a question of the agent to the
user as MCP's own way to ask (``input_required`` at 2026-07-28, an elicitation at 2025-11-25), and
the answer as the tool's result. The door is behind the authentication of the service's other doors
(``access``): the caller needs the ``mcp`` permission, acts for the users it may act for, and owns
every session and run it starts, as through ``/api/v1`` and A2A. ``door`` is the tool, ``endpoint``
the HTTP route in front of the SDK's Streamable HTTP transport.
"""
