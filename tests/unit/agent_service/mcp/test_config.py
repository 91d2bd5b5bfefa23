"""The MCP servers of a deployment as configured: checked at start-up, secrets only by reference to
the environment and never shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_service.mcp.config import ConfigError, Limits, Secret, load_servers, resolve

STDIO = {"name": "files", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv"]}
HTTP = {"name": "tickets", "url": "https://mcp.example.com/mcp", "bearer_token": {"from_env": "TICKETS_TOKEN"}}


def test_a_server_is_a_command_or_a_url_never_both() -> None:
    servers = load_servers([STDIO, HTTP], None)
    assert [(s.name, s.transport, s.tool_prefix) for s in servers] == [("files", "stdio", "files_"),
                                                                       ("tickets", "http", "tickets_")]
    for wrong, message in (
        ({"name": "x"}, "either command"),
        ({"name": "x", "command": "a", "url": "https://a/mcp"}, "either command"),
        ({"name": "x", "command": "a", "headers": {"A": "b"}}, "are for a url"),
        ({"name": "x", "url": "https://a/mcp", "args": ["-v"]}, "are for a command"),
        ({"name": "x", "url": "ftp://a/mcp"}, "an http\\(s\\) URL"),
        ({"name": "x", "url": "https://user:pw@a/mcp"}, "must not carry credentials"),
        ({"name": "x y", "command": "a"}, "name"),
        ({"name": "x", "command": "a", "colour": "red"}, "Extra inputs"),
    ):
        with pytest.raises(ConfigError, match=message):
            load_servers([wrong], None)


def test_a_secret_is_only_a_reference_to_the_environment_and_never_shown() -> None:
    with pytest.raises(ConfigError, match="bearer_token"):
        load_servers([{**HTTP, "bearer_token": "s3cr3t-in-the-file"}], None)
    with pytest.raises(ConfigError) as refused:
        load_servers([{**HTTP, "oauth": {"client_id": "a", "client_secret": "s3cr3t", "issuer": "https://id"}}], None)
    assert "s3cr3t" not in str(refused.value)
    [server] = load_servers([{**HTTP, "headers": {"X-Team": "support", "X-Key": {"from_env": "TICKETS_KEY"}}}], None)
    resolved = resolve(server, Limits(), {"TICKETS_TOKEN": "t0k3n", "TICKETS_KEY": "k3y"})
    assert resolved.bearer_token.reveal() == "t0k3n" and resolved.headers["X-Key"].reveal() == "k3y"
    assert "t0k3n" not in repr(resolved) and "k3y" not in repr(resolved) and str(Secret("x")) == "Secret('***')"
    with pytest.raises(ConfigError, match="environment variable TICKETS_KEY \\(header X-Key\\) is not set"):
        resolve(server, Limits(), {"TICKETS_TOKEN": "t0k3n"})
    [plain] = load_servers([HTTP], None)
    with pytest.raises(ConfigError, match="environment variable TICKETS_TOKEN \\(bearer_token\\) is not set"):
        resolve(plain, Limits(), {})


def test_names_and_prefixes_are_unique_and_limits_come_from_the_server_or_the_deployment(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="two MCP servers have the name 'files'"):
        load_servers([STDIO, STDIO], None)
    with pytest.raises(ConfigError, match="tool prefix 'x_'"):
        load_servers([{**STDIO, "prefix": "x_"}, {**HTTP, "prefix": "x_"}], None)
    file = tmp_path / "mcp.yaml"
    file.write_text("mcp_servers:\n  - name: tickets\n    url: https://mcp.example.com/mcp\n    timeout_s: 5\n")
    [files, tickets] = load_servers([STDIO], file)
    assert resolve(tickets, Limits(call_timeout_s=30), {}).call_timeout_s == 5
    assert resolve(files, Limits(call_timeout_s=30, max_result_bytes=2048), {}).max_result_bytes == 2048
    file.write_text("just: a mapping")
    with pytest.raises(ConfigError, match="must hold a list"):
        load_servers([], file)
