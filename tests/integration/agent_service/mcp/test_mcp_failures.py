"""MCP servers that fail: a stdio server that exits is started again with back-off (its tools
failing at once meanwhile, saying why); an HTTP server down or slow is a failed call within the
timeout, and its breaker makes a dead server cost one fast failure; garbage, an enormous result
and schemas no model can take are clear errors, never a crash; ``/ready`` tells each server's state
and stays ready."""

from __future__ import annotations

import time

from tests.integration.agent_service.mcp.conftest import (
    events_of,
    http_server,
    serve_http,
    stdio_server,
    until,
)
from tests.support.mcp_server import build
from tests.support.models import CommandModel
from tests.support.servers import free_port


async def _call(agent, tool: str, arguments: str = "{}", profile: str = "ops"):
    """One run calling ``tool``: its TOOL_END data (and the run, which must end COMPLETE)."""
    run = await agent.execute(f"call {tool} {arguments}", body={"profile_name": profile})
    assert run.last.type.value == "COMPLETE", run.events
    return run.of_type("TOOL_END")[0].data


def _connection(agent, name: str = "ops"):
    return agent.app.state.agent.mcp.connections[name]


async def test_a_stdio_server_that_exits_is_started_again_and_its_tools_fail_at_once_meanwhile(
    agent_factory, profiles_file, events,
) -> None:
    async with agent_factory(provider=CommandModel(), profiles_file=profiles_file,
                             mcp_servers=[stdio_server(events)], mcp_restart_delays_seconds=[1.5]) as agent:
        crashed = await _call(agent, "ops_exit_now")
        assert crashed["ok"] is False and "connection to the server broke" in crashed["error"]
        assert events_of(events, tool="exit_now")
        connection = _connection(agent)
        await until(lambda: connection.state == "restarting", what="the restart to be scheduled")

        started = time.monotonic()
        meanwhile = await _call(agent, "ops_add", '{"a": 1, "b": 2}')
        assert time.monotonic() - started < 1.0
        assert meanwhile["ok"] is False
        assert "being restarted" in meanwhile["error"] and "ops" in meanwhile["error"]
        ready = await agent.http.get("/ready")
        assert ready.status_code == 200
        assert ready.json()["mcp_servers"]["ops"]["state"] == "restarting"

        await until(lambda: connection.state == "ready", what="the server to be started again")
        again = await _call(agent, "ops_add", '{"a": 1, "b": 2}')
        assert again["ok"] is True and again["result"] == {"result": 3}
        report = (await agent.http.get("/ready")).json()["mcp_servers"]["ops"]
        assert report["state"] == "ready" and report["restarts"] == 1
        metrics = (await agent.http.get("/metrics")).text
        assert 'agent_mcp_server_restarts_total{server="ops"} 1.0' in metrics


async def test_an_http_server_down_is_a_fast_failure_until_it_comes_up(agent_factory, profiles_file, events) -> None:
    port = free_port()
    server = {"name": "ops", "url": f"http://127.0.0.1:{port}/mcp"}
    started = time.monotonic()
    async with agent_factory(provider=CommandModel(), profiles_file=profiles_file, mcp_servers=[server],
                             mcp_restart_delays_seconds=[0.3]) as agent:
        assert time.monotonic() - started < 5, "a server that is down does not hold the start-up"
        ready = await agent.http.get("/ready")
        assert ready.status_code == 200 and ready.json()["mcp_servers"]["ops"]["state"] in ("starting", "restarting")
        down = await _call(agent, "calculator", '{"expression": "1+1"}')
        assert down["ok"] is True, "the built-in tools work while a server is down"

        async with serve_http(build(events=events), port=port):
            connection = _connection(agent)
            await until(lambda: connection.state == "ready", what="the server to be connected")
            up = await _call(agent, "ops_add", '{"a": 20, "b": 22}')
            assert up["ok"] is True and up["result"] == {"result": 42}

        # The server went away: the next call fails within the timeout, not after a wait.
        started = time.monotonic()
        gone = await _call(agent, "ops_add", '{"a": 1, "b": 1}')
        assert gone["ok"] is False and time.monotonic() - started < 2
        await until(lambda: _connection(agent).state == "restarting", what="the server to be seen gone")


async def test_a_slow_http_server_times_out_and_its_breaker_makes_the_next_calls_fail_at_once(
    agent_factory, profiles_file, events,
) -> None:
    async with http_server(events) as url:
        server = {"name": "ops", "url": url, "timeout_s": 0.5}
        async with agent_factory(provider=CommandModel(), profiles_file=profiles_file, mcp_servers=[server],
                                 mcp_breaker_failures=2, mcp_breaker_open_seconds=1.5) as agent:
            for _ in range(2):
                started = time.monotonic()
                slow = await _call(agent, "ops_wait", '{"seconds": 30}', profile="ops")
                assert slow["ok"] is False and "did not answer within 0.5 s" in slow["error"]
                assert time.monotonic() - started < 2
            assert _connection(agent).breaker.state == "open"

            started = time.monotonic()
            refused = await _call(agent, "ops_add", '{"a": 1, "b": 1}')
            assert time.monotonic() - started < 0.5, "an open breaker fails the call at once"
            assert refused["ok"] is False and "not answering" in refused["error"]

            await until(lambda: _connection(agent).breaker.state == "half_open", what="the breaker to let a probe")
            probe = await _call(agent, "ops_add", '{"a": 1, "b": 1}')
            assert probe["ok"] is True and _connection(agent).breaker.state == "closed"
            # The timed-out calls were cancelled on the server, not left running.
            await until(lambda: len(events_of(events, tool="wait", state="cancelled")) == 2,
                        what="the server to see both calls cancelled")
            metrics = (await agent.http.get("/metrics")).text
            assert 'agent_mcp_calls_total{outcome="timeout",server="ops"} 2.0' in metrics
            assert 'agent_mcp_calls_total{outcome="refused",server="ops"} 1.0' in metrics


async def test_garbage_from_a_stdio_server_is_a_clear_error(agent_factory, profiles_file, events) -> None:
    async with agent_factory(provider=CommandModel(), profiles_file=profiles_file,
                             mcp_servers=[stdio_server(events, hostile=True, timeout_s=3)]) as agent:
        noise = await _call(agent, "ops_noise")
        assert noise["ok"] is True and noise["result"] == {"result": "answered after the noise"}
        garbage = await _call(agent, "ops_garbage_result")
        assert garbage["ok"] is False and "not valid MCP" in garbage["error"]
        after = await _call(agent, "ops_add", '{"a": 2, "b": 2}')
        assert after["ok"] is True and after["result"] == {"result": 4}


async def test_garbage_from_an_http_server_is_a_clear_error(agent_factory, profiles_file, events) -> None:
    async with http_server(events, hostile=True) as url, agent_factory(
        provider=CommandModel(), profiles_file=profiles_file, mcp_servers=[{"name": "ops", "url": url}],
    ) as agent:
        garbage = await _call(agent, "ops_garbage_result")
        assert garbage["ok"] is False and "not valid MCP" in garbage["error"]
        after = await _call(agent, "ops_add", '{"a": 2, "b": 2}')
        assert after["ok"] is True and after["result"] == {"result": 4}


async def test_an_enormous_result_is_refused_over_the_cap(agent_factory, profiles_file, events, ops_server) -> None:
    server = {**ops_server, "max_result_bytes": 1024 * 1024}
    async with agent_factory(provider=CommandModel(), profiles_file=profiles_file, mcp_servers=[server]) as agent:
        big = await _call(agent, "ops_big", '{"size": 3000000}')
        assert big["ok"] is False and "1048576 bytes" in big["error"], big
        fits = await _call(agent, "ops_big", '{"size": 1000}')
        assert fits["ok"] is True and fits["result"] == {"result": "x" * 1000}


async def test_tools_whose_schemas_no_model_takes_are_left_out(agent_factory, profiles_file, events, caplog) -> None:
    async with agent_factory(provider=CommandModel(), profiles_file=profiles_file,
                             mcp_servers=[stdio_server(events, hostile=True)]) as agent:
        profiles = {p["name"]: p for p in (await agent.http.get("/api/v1/agent/profiles",
                                                                headers=agent.headers())).json()}
        offered = set(profiles["ops"]["tools"])
        assert {"ops_add", "ops_deploy", "ops_dotted_name_with_spaces"} <= offered
        hostile = {"huge_schema", "deep_schema", "remote_ref", "invalid_schema"}
        assert not {f"ops_{name}" for name in hostile} & offered
        assert not any(name.startswith("ops_a_name_far_too_long") for name in offered)
        left_out = {r.tool for r in caplog.records if r.getMessage() == "MCP tool left out"}
        assert hostile | {"a_name_far_too_long_for_any_model_provider_to_take_as_a_function_name_at_all"} <= left_out
        dotted = await _call(agent, "ops_dotted_name_with_spaces")
        # Called by its own name (the listing made it up: the server has no such tool).
        assert dotted["ok"] is False and "Unknown tool: dotted.name/with spaces" in dotted["error"]
        metrics = (await agent.http.get("/metrics")).text
        assert 'agent_mcp_tools_left_out_total{server="ops"} 5.0' in metrics


async def test_ready_reports_each_server_and_stays_ready(agent_factory, profiles_file, events) -> None:
    down = {"name": "gone", "url": f"http://127.0.0.1:{free_port()}/mcp"}
    async with agent_factory(provider=CommandModel(), profiles_file=profiles_file,
                             mcp_servers=[stdio_server(events), down]) as agent:
        ready = await agent.http.get("/ready")
    assert ready.status_code == 200
    servers = ready.json()["mcp_servers"]
    assert servers["ops"]["state"] == "ready" and servers["ops"]["tools"] > 5
    assert servers["ops"]["transport"] == "stdio" and servers["ops"]["protocol"] == "2026-07-28"
    assert servers["gone"]["state"] == "restarting" and servers["gone"]["last_error"]
