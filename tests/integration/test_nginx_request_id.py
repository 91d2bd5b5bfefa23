"""The shipped nginx config (deploy/nginx/nginx.conf) run by a real nginx on loopback, in front of a
small upstream that answers with the X-Request-ID it received: the client's id goes through unchanged,
and a request without one gets one made by nginx. Only the upstream addresses, the listen ports and the
file locations are changed to run it here."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from tests.support.databases import services_required
from tests.support.servers import REPO_ROOT, free_port, serve_app

NGINX_CONF = REPO_ROOT / "deploy" / "nginx" / "nginx.conf"


def _nginx() -> str:
    found = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)
    if found is None:
        if services_required():
            pytest.fail("nginx is required (CI=true) but not installed: .ci/run installs it")
        pytest.skip("nginx is not installed here; CI runs this test with it")
    return found


async def _echo_request_id(request: Request) -> PlainTextResponse:
    return PlainTextResponse(request.headers.get("x-request-id", "<none>"))


def _local_config(tmp_path: Path, upstream_port: int, ports: dict[str, int]) -> Path:
    conf = NGINX_CONF.read_text()
    conf = re.sub(r"server (chat|agent)-\d:\d+;", f"server 127.0.0.1:{upstream_port};", conf)
    for public, port in ports.items():
        conf = conf.replace(f"listen {public};", f"listen 127.0.0.1:{port};")
    # Logs and buffers in the test's folder: a packaged nginx points them at system paths.
    local = "".join(f"  {name}_temp_path {tmp_path / name};\n" for name in ("client_body", "proxy", "fastcgi",
                                                                            "uwsgi", "scgi"))
    conf = conf.replace("http {\n", f"http {{\n  access_log off;\n{local}", 1)
    path = tmp_path / "nginx.conf"
    path.write_text(conf)
    return path


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@pytest.fixture
async def nginx(tmp_path: Path) -> AsyncIterator[dict[str, str]]:
    binary = _nginx()
    ports = {"8080": free_port(), "8081": free_port()}
    app = Starlette(routes=[Route("/{path:path}", _echo_request_id)])
    async with serve_app(app) as upstream:
        config = _local_config(tmp_path, int(upstream.rsplit(":", 1)[1]), ports)
        proc = await asyncio.create_subprocess_exec(
            binary, "-p", str(tmp_path), "-c", str(config), "-e", "stderr",
            "-g", f"daemon off; pid {tmp_path / 'nginx.pid'};",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )
        try:
            async with asyncio.timeout(10):
                while not all(_accepts(port) for port in ports.values()):
                    if proc.returncode is not None:
                        raise AssertionError((await proc.stdout.read()).decode())
                    await asyncio.sleep(0.05)
            yield {"chat": f"http://127.0.0.1:{ports['8080']}", "agent": f"http://127.0.0.1:{ports['8081']}"}
        finally:
            proc.terminate()
            await proc.wait()


@pytest.mark.parametrize("server", ["chat", "agent"])
async def test_the_clients_request_id_passes_through_and_a_missing_one_is_made(nginx, server) -> None:
    async with httpx.AsyncClient(base_url=nginx[server], timeout=10) as http:
        given = await http.get("/conversations", headers={"X-Request-ID": "client-chosen-id-42"})
        assert given.status_code == 200 and given.text == "client-chosen-id-42"
        made = [(await http.get("/conversations")).text for _ in range(2)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", made_id) for made_id in made), made  # nginx's $request_id
    assert made[0] != made[1]
