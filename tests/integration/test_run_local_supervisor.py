"""``make run`` supervises its two services with real processes: the Agent Service killed, the chat
stays up and answers, and the agent is started again; a port already in use is named before anything
starts, with a non-zero exit."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from threading import Thread

import httpx
import orjson
import psutil
import pytest
import websockets

from tests.integration.make_run import fresh_env, start_make_run
from tests.support.servers import free_port


def _listener_pid(port: int) -> int | None:
    """The process listening on the port (make run's children are ours, so no privileges needed)."""
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port:
            return conn.pid
    return None


async def _direct_reply(chat_url: str, token: str) -> str:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=chat_url, headers=headers, timeout=30) as http:
        cid = (await http.post("/conversations", json={"title": "agent down"})).json()["id"]
        ws_url = chat_url.replace("http://", "ws://") + f"/conversations/{cid}/ws"
        async with websockets.connect(ws_url, additional_headers=headers) as ws:
            sent = await http.post(f"/conversations/{cid}/messages", json={"content": "hello, who is there?"})
            assert sent.status_code == 202 and sent.json()["route"]["target"] == "direct_llm", sent.text
            async with asyncio.timeout(30):
                while True:
                    frame = orjson.loads(await ws.recv())
                    if frame["type"] == "message.completed":
                        return frame["data"]["content"]


async def test_the_chat_keeps_answering_while_the_killed_agent_is_restarted(tmp_path) -> None:
    run = await start_make_run(fresh_env(tmp_path))
    try:
        await run.read_until("dev token for user")
        agent_pid = _listener_pid(run.agent_port)
        assert agent_pid is not None
        os.kill(agent_pid, signal.SIGKILL)

        noticed = await run.read_until("exited", timeout=10)
        async with httpx.AsyncClient(timeout=5) as http:
            assert (await http.get(f"{run.chat_url}/health")).status_code == 200
        assert await _direct_reply(run.chat_url, run.token)
        assert "make run: agent service exited with code -9; restarting it in 1 s" in noticed[-1], noticed
        assert "chat service keeps running" in noticed[-1]

        await run.read_until(f"make run: agent service is back on {run.agent_url}", timeout=60)
        assert _listener_pid(run.agent_port) not in (None, agent_pid)
        async with httpx.AsyncClient(timeout=5) as http:
            assert (await http.get(f"{run.agent_url}/health")).status_code == 200
            assert (await http.get(f"{run.chat_url}/health")).status_code == 200
    finally:
        rest = await run.stop()
    assert run.proc.returncode == 0, rest


@contextmanager
def _listening(port: int) -> Iterator[None]:
    with socket.create_server(("127.0.0.1", port)):
        yield


@contextmanager
def _old_instance(port: int) -> Iterator[None]:
    """Something that answers GET /health with 200 on the port, as an earlier make run would."""

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", port), Health)
    thread = Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("busy", "name", "occupy"), [
    ("agent", "agent service", _listening),
    ("chat", "chat service", _old_instance),
])
async def test_a_port_in_use_is_named_and_nothing_starts(tmp_path, busy, name, occupy) -> None:
    ports = {"chat": free_port(), "agent": free_port()}
    with occupy(ports[busy]):
        run = await start_make_run(fresh_env(tmp_path), chat_port=ports["chat"], agent_port=ports["agent"])
        output = await asyncio.wait_for(run.proc.communicate(), 60)
    text = output[0].decode()
    assert run.proc.returncode not in (0, None), text
    assert f"the {name} port {ports[busy]} on 127.0.0.1 is already in use" in text, text
    assert f"{busy.upper()}_PORT=<port> make run" in text
    if occupy is _old_instance:
        assert "it answers /health" in text
    assert "started (pid" not in text, text  # it stopped before starting anything
