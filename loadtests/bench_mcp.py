"""What an MCP tool call costs the Agent Service in CPU, beyond the server's own time.

The tests' MCP server (``tests/support/mcp_server.py``, the official SDK) runs in a process of its
own, over stdio and over Streamable HTTP, at 2026-07-28 and at 2025-11-25 (``--legacy``); this
process makes the calls on one event loop (uvloop, as the service runs), one at a time, and counts
its own CPU time (``time.process_time``), which holds none of the server's. Two paths are measured:

- ``sdk``: the SDK's ``session.call_tool`` alone, the floor of any client;
- ``tool``: the Agent Service's MCP tool (``MCPTool.run``: the connection's call task, timer and
  breaker, the SDK, the result read for the model), what a run's tool call costs beyond what every
  tool call costs in the engine.

    .venv/bin/python -m loadtests.bench_mcp [--calls 500] [--batches 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from prometheus_client import CollectorRegistry

from agent_service.mcp.config import Limits, load_servers, resolve
from agent_service.mcp.metrics import MCPMetrics
from agent_service.mcp.service import MCPTools
from agent_service.tools.base import ToolContext
from loadtests.common import free_port, machine, write_results
from shared.protocol import UserContext
from tests.support.servers import REPO_ROOT

RESULTS = Path(__file__).parent / "results"
TARGET_MS = 2.0
ARGS = {"a": 2, "b": 40}


def _server_args(transport: str, legacy: bool, *more: str) -> list[str]:
    return ["-m", "tests.support.mcp_server", transport, *more] + (["--legacy"] if legacy else [])


async def _http_server(legacy: bool) -> tuple[asyncio.subprocess.Process, str]:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *_server_args("http", legacy, "--port", str(port)), cwd=REPO_ROOT)
    url = f"http://127.0.0.1:{port}/mcp"
    async with httpx.AsyncClient() as http:
        for _ in range(200):
            try:
                await http.get(url, timeout=1)
                return proc, url
            except httpx.TransportError:
                await asyncio.sleep(0.05)
    proc.kill()
    raise RuntimeError("the MCP test server did not start")


def _cpu_ms_per_call(samples: list[float], calls: int) -> float:
    return statistics.median(samples) / calls * 1000


async def _batches(call, calls: int, batches: int) -> dict[str, Any]:
    for _ in range(200):  # warm: imports, validators, the connection
        await call()
    cpu, wall = [], []
    for _ in range(batches):
        started_cpu, started = time.process_time(), time.perf_counter()
        for _ in range(calls):
            await call()
        cpu.append(time.process_time() - started_cpu)
        wall.append(time.perf_counter() - started)
    return {"cpu_ms_per_call": round(_cpu_ms_per_call(cpu, calls), 3),
            "wall_ms_per_call": round(_cpu_ms_per_call(wall, calls), 3)}


async def _measure(config: dict[str, Any], calls: int, batches: int) -> dict[str, Any]:
    limits = Limits()
    [server] = load_servers([config], None)
    tools = MCPTools([resolve(server, limits)], limits, MCPMetrics(CollectorRegistry()), artifact_max_bytes=262144)
    await tools.start()
    try:
        connection = tools.connections["ops"]
        client = connection._client
        assert client is not None, connection.health()
        tool = tools.get("ops_add")
        ctx = ToolContext("bench", "bench", UserContext(user_id="bench"))

        async def sdk() -> None:
            await client.session.call_tool("add", ARGS)

        async def adapter() -> None:
            await tool.run(ARGS, ctx)

        result = {"protocol": connection.protocol_version, "sdk": await _batches(sdk, calls, batches),
                  "tool": await _batches(adapter, calls, batches)}
        result["ours_over_sdk_cpu_ms"] = round(result["tool"]["cpu_ms_per_call"] - result["sdk"]["cpu_ms_per_call"], 3)
        return result
    finally:
        await tools.aclose()


async def main(calls: int, batches: int) -> dict[str, Any]:
    results: dict[str, Any] = {"machine": machine(), "calls": calls, "batches": batches, "loop": "uvloop",
                               "target_ms": TARGET_MS, "variants": {}}
    for legacy in (False, True):
        revision = "2025-11-25" if legacy else "2026-07-28"
        stdio = {"name": "ops", "command": sys.executable, "args": _server_args("stdio", legacy), "cwd": str(REPO_ROOT)}
        results["variants"][f"stdio {revision}"] = await _measure(stdio, calls, batches)
        proc, url = await _http_server(legacy)
        try:
            results["variants"][f"http {revision}"] = await _measure({"name": "ops", "url": url}, calls, batches)
        finally:
            proc.terminate()
            await proc.wait()
    worst = max(v["tool"]["cpu_ms_per_call"] for v in results["variants"].values())
    results["worst_cpu_ms_per_call"] = worst
    results["verdict"] = "MET" if worst <= TARGET_MS else "MISSED"
    return results


def _print(results: dict[str, Any]) -> None:
    print(f"{'variant':<18} {'protocol':<11} {'sdk cpu ms':>10} {'tool cpu ms':>11} {'ours':>6} {'tool wall ms':>12}")
    for name, v in results["variants"].items():
        print(f"{name:<18} {v['protocol']:<11} {v['sdk']['cpu_ms_per_call']:>10.3f} "
              f"{v['tool']['cpu_ms_per_call']:>11.3f} {v['ours_over_sdk_cpu_ms']:>6.3f} {v['tool']['wall_ms_per_call']:>12.3f}")
    print(f"worst CPU per MCP call: {results['worst_cpu_ms_per_call']:.3f} ms (target {TARGET_MS} ms): "
          f"{results['verdict']}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=500, help="calls per batch")
    parser.add_argument("--batches", type=int, default=5, help="batches per path (the median is reported)")
    parser.add_argument("--out", type=Path, default=RESULTS / "bench-mcp.json")
    options = parser.parse_args()
    import uvloop

    outcome = uvloop.run(main(options.calls, options.batches))
    _print(outcome)
    write_results(options.out, outcome)
