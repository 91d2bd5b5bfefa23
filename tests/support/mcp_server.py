"""An MCP server made with the official Python SDK, for the tests: over stdio as a process of its
own (``python -m tests.support.mcp_server stdio``), or over Streamable HTTP served by a real uvicorn
on loopback (``http_app``). It speaks 2026-07-28 and 2025-11-25 alike; ``--legacy`` (``legacy=True``)
makes it a 2025-11-25-only server: it answers ``server/discover`` as a server of that revision does
(method not found) and then takes the ``initialize`` handshake. (The SDK serves a stdio connection
in the era its first request opens, so the stdio server reads requests without the 2026-07-28
envelope: to it, every client is a 2025-11-25 one.) What its tools saw (a call started, cancelled, finished) is appended as JSON
lines to ``--events`` so a test can read what reached the server.

As a process of its own over HTTP too (``python -m tests.support.mcp_server http --port P``), for
the benchmark (``loadtests/bench_mcp.py``).

``--hostile`` adds what a server must not be able to hurt the agent with: tools whose schemas no
model provider takes, a result written over its call's answer that is not MCP, and lines on stdout
that are not JSON-RPC.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import time
from pathlib import Path
from typing import Annotated, Any, Literal, Self

import mcp_types as types
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, Elicit, Image, MCPServer, Resolve
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

READ_ONLY = types.ToolAnnotations(readOnlyHint=True, idempotentHint=True)
CHANGES = types.ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False)
# A 1x1 PNG.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


class Environment(BaseModel):
    environment: str


class Booking(BaseModel):
    seats: int
    window: bool
    meal: Literal["vegetarian", "fish", "meat"] = "fish"


def ask_booking(ctx: Context) -> Elicit[Booking]:
    return Elicit("How should the table be booked?", Booking)


class Weather(BaseModel):
    city: str
    temperature_c: float
    conditions: str


def ask_environment(ctx: Context) -> Elicit[Environment]:
    return Elicit("Which environment should it go to (staging or production)?", Environment)


class Events:
    """JSON lines a test reads back: what reached the server."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def add(self, **event: Any) -> None:
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as out:
                out.write(json.dumps({"ts": time.time(), "pid": os.getpid(), **event}) + "\n")


def read_events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def build(*, legacy: bool = False, events: Path | None = None, hostile: bool = False,
          auth: tuple[AuthSettings, TokenVerifier] | None = None) -> MCPServer:
    """The server; with ``auth`` (its settings and token verifier) every request needs a bearer token
    (OAuth: it names its authorization server in its protected resource metadata)."""
    settings, verifier = auth if auth is not None else (None, None)
    server = MCPServer("taskforce-test-server", version="1.0", auth=settings, token_verifier=verifier)
    log = Events(events)
    _plain_tools(server, log)
    _tools_that_ask_or_wait(server, log)
    if hostile:
        _hostile(server)
    if legacy:
        async def no_discover(ctx: Any, params: Any) -> Any:
            raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found")

        server._lowlevel_server.add_request_handler("server/discover", types.RequestParams, no_discover)
    return server


def _plain_tools(server: MCPServer, log: Events) -> None:
    @server.tool(annotations=READ_ONLY)
    def add(a: float, b: float) -> float:
        """Add two numbers."""
        log.add(tool="add", a=a, b=b)
        return a + b

    @server.tool(annotations=READ_ONLY)
    def echo(text: str) -> str:
        """Say the text back."""
        return text

    @server.tool(annotations=READ_ONLY)
    def pixel() -> Image:
        """A one-pixel image."""
        return Image(data=PIXEL, format="png")

    @server.tool(annotations=READ_ONLY)
    def weather(city: str) -> Weather:
        """Today's weather in a city (structured)."""
        return Weather(city=city, temperature_c=21.5, conditions="sunny")

    @server.tool(annotations=READ_ONLY)
    def big(size: int) -> str:
        """A text of ``size`` characters."""
        return "x" * size

    @server.tool(annotations=READ_ONLY)
    def fail(reason: str) -> str:
        """Fails with the reason."""
        raise ToolError(reason)

    @server.tool(annotations=READ_ONLY)  # (not true, but no approval in the way of the crash tests)
    def exit_now(code: int = 3) -> str:
        """Ends the server's process (a crash)."""
        log.add(tool="exit_now")
        os._exit(code)

    @server.tool(annotations=READ_ONLY)
    async def learn(name: str, ctx: Context) -> str:
        """Adds a tool called ``name`` and tells the client its tools changed."""

        def learned(text: str) -> str:
            return text

        server.add_tool(learned, name=name, description=f"learned tool {name}", annotations=READ_ONLY)
        if ctx.protocol_version == "2026-07-28":
            await ctx.notify_tools_changed()
        else:
            await ctx.session.send_tool_list_changed()
        return f"learned {name}"


def _tools_that_ask_or_wait(server: MCPServer, log: Events) -> None:
    @server.tool(annotations=CHANGES)
    async def deploy(service: str, target: Annotated[Environment, Resolve(ask_environment)]) -> str:
        """Deploys a service; asks which environment."""
        log.add(tool="deploy", service=service, environment=target.environment)
        return f"deployed {service} to {target.environment}"

    @server.tool(annotations=READ_ONLY)
    async def form(booking: Annotated[Booking, Resolve(ask_booking)]) -> str:
        """Books a table; asks several things at once."""
        return f"{booking.seats} seats, {'window' if booking.window else 'aisle'}, {booking.meal}"

    @server.tool(annotations=READ_ONLY)
    async def wait(seconds: float, ctx: Context) -> str:
        """Waits, then answers; tells the events file when it was cancelled."""
        log.add(tool="wait", state="started", request_id=ctx.request_id)
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            log.add(tool="wait", state="cancelled", request_id=ctx.request_id)
            raise
        log.add(tool="wait", state="finished", request_id=ctx.request_id)
        return f"waited {seconds} s"


def _hostile(server: MCPServer) -> None:
    # (A schema that is not an object's cannot be sent: the SDK checks its own server's listing.)
    bad_schemas = {
        "huge_schema": {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "d" * 200}
                                                         for i in range(400)}},
        "deep_schema": _deep(60),
        "remote_ref": {"type": "object", "properties": {"a": {"$ref": "https://evil.example/schema.json"}}},
        "invalid_schema": {"type": "object", "properties": {"a": {"type": 12}}},
        "a_name_far_too_long_for_any_model_provider_to_take_as_a_function_name_at_all": {"type": "object"},
    }
    listed = server._lowlevel_server._request_handlers["tools/list"].handler

    async def list_with_hostile(ctx: Any, params: Any) -> types.ListToolsResult:
        result = await listed(ctx, params)
        extra = [types.Tool(name=name, input_schema=schema) for name, schema in bad_schemas.items()]
        extra.append(types.Tool(name="dotted.name/with spaces", input_schema={"type": "object"},
                                annotations=READ_ONLY))
        return types.ListToolsResult(tools=[*result.tools, *extra])

    server._lowlevel_server.add_request_handler("tools/list", types.PaginatedRequestParams, list_with_hostile)

    @server.tool(annotations=READ_ONLY)
    async def noise(ctx: Context) -> str:
        """Writes lines that are not JSON-RPC to stdout, then answers."""
        _onto_the_wire(b"this is not json\n{\"jsonrpc\": \"2.0\", \"broken\n")
        return "answered after the noise"

    @server.tool(annotations=READ_ONLY)
    async def garbage_result(ctx: Context) -> str:
        """Answers its own call with a result that is not MCP (stdio), then waits."""
        answer = {"jsonrpc": "2.0", "id": int(ctx.request_id) if ctx.request_id.isdigit() else ctx.request_id,
                  "result": {"content": "not a list of blocks", "isError": "maybe"}}
        _onto_the_wire(json.dumps(answer).encode() + b"\n")
        await asyncio.sleep(30)
        return "never read"


def _onto_the_wire(data: bytes) -> None:
    """Bytes straight onto the protocol's stdout: the SDK points fd 1 at stderr while it serves
    (so a stray print cannot corrupt the wire) and keeps the wire on a private copy."""
    from mcp.server import stdio

    claim = stdio._claims.get(1)
    os.write(claim.private_fd if claim is not None and claim.private_fd is not None else 1, data)


def _deep(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"n": schema}}
    return schema


def http_app(server: MCPServer) -> Any:
    """The server's Streamable HTTP app (``/mcp``); it also answers a JSON body that is not JSON-RPC
    to a call of ``garbage_result`` (what a broken proxy or server sends)."""
    app = server.streamable_http_app(json_response=False)

    async def garbage_for(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        chunks = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if b'"garbage_result"' in body:
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": b"{this is not json"})
            return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await app(scope, replay, send)

    return _WithLifespan(app, garbage_for)


class _WithLifespan:
    """The garbage wrapper for requests, the SDK app's own lifespan (its session manager)."""

    def __init__(self, app: Any, requests: Any) -> None:
        self.app = app
        self.requests = requests

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
        else:
            await self.requests(scope, receive, send)


class _WithoutEnvelope:
    """A read stream whose requests lose the 2026-07-28 ``_meta`` envelope."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def _strip(self, item: Any) -> Any:
        message = getattr(getattr(item, "message", None), "params", None)
        meta = message.get("_meta") if isinstance(message, dict) else None
        if isinstance(meta, dict):
            for key in [k for k in meta if k.startswith("io.modelcontextprotocol/")]:
                del meta[key]
        return item

    async def receive(self) -> Any:
        return self._strip(await self._inner.receive())

    def __aiter__(self) -> _WithoutEnvelope:
        return self

    async def __anext__(self) -> Any:
        return self._strip(await self._inner.__anext__())

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> Any:
        return await self._inner.__aexit__(*exc)


async def _serve_legacy_stdio(server: MCPServer) -> None:
    from mcp.server.stdio import stdio_server

    lowlevel = server._lowlevel_server
    async with stdio_server() as (read, write):
        await lowlevel.run(_WithoutEnvelope(read), write, lowlevel.create_initialization_options())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=["stdio", "http"])
    parser.add_argument("--legacy", action="store_true")
    parser.add_argument("--hostile", action="store_true")
    parser.add_argument("--events", type=Path)
    parser.add_argument("--port", type=int, default=0, help="http: the port on 127.0.0.1")
    args = parser.parse_args()
    server = build(legacy=args.legacy, events=args.events, hostile=args.hostile)
    if args.transport == "http":
        import uvicorn

        uvicorn.run(http_app(server), host="127.0.0.1", port=args.port, log_level="warning")
    elif args.legacy:
        import anyio

        anyio.run(_serve_legacy_stdio, server)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
