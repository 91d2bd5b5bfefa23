"""``make run`` (``deploy/run_local.py``): both services come up on the embedded defaults, the
printed chat URL and development token work, an agent message is answered, the README's token command
makes a token it accepts, and Ctrl-C (SIGTERM) stops everything cleanly. Runs the script as a newcomer
would, on free ports and fresh SQLite files."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest
import websockets

from tests.integration.make_run import MakeRun, fresh_env, start_make_run
from tests.support.servers import REPO_ROOT

README = REPO_ROOT / "README.md"


@pytest.fixture(scope="module")
async def make_run(tmp_path_factory) -> AsyncIterator[MakeRun]:
    run = await start_make_run(fresh_env(tmp_path_factory.mktemp("make-run")))
    try:
        await run.read_until("dev token for user")
        yield run
    finally:
        await run.stop()


async def test_make_run_serves_the_product_on_its_defaults(make_run: MakeRun) -> None:
    page = next(line for line in make_run.lines if "chat page:" in line).split("chat page:", 1)[1].strip()
    chat_url = page.split("/?", 1)[0]
    assert chat_url == make_run.chat_url
    headers = {"Authorization": f"Bearer {make_run.token}"}
    async with httpx.AsyncClient(base_url=chat_url, headers=headers, timeout=30) as http:
        assert (await http.get("/")).status_code == 200  # the chat page
        created = await http.post("/conversations", json={"title": "first try"})
        assert created.status_code == 201, created.text
        cid = created.json()["id"]
        ws_url = chat_url.replace("http://", "ws://") + f"/conversations/{cid}/ws"
        async with websockets.connect(ws_url, additional_headers=headers) as ws:
            sent = await http.post(f"/conversations/{cid}/messages", json={"content": "/agent what is 17*23"})
            assert sent.status_code == 202 and sent.json()["route"]["target"] == "agent", sent.text
            frames = []
            async with asyncio.timeout(60):
                while not frames or frames[-1]["type"] != "agent.complete":
                    frames.append(orjson.loads(await ws.recv()))
    answers = [f["data"]["content"] for f in frames if f["type"] == "message.completed"]
    assert len(answers) == 1 and "391" in answers[0], answers


async def test_the_readme_token_command_makes_a_token_make_run_accepts(make_run: MakeRun) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AUTH_JWT_SECRET"}
    cli = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "conversation_service", "token", "--user", "alice",
        cwd=REPO_ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    token, stderr = await asyncio.wait_for(cli.communicate(), 60)
    assert cli.returncode == 0 and "dev-secrets.env" in stderr.decode(), stderr.decode()
    headers = {"Authorization": f"Bearer {token.decode().strip()}"}
    async with httpx.AsyncClient(base_url=make_run.chat_url, headers=headers, timeout=30) as http:
        created = await http.post("/conversations", json={"title": "from the README"})
        assert created.status_code == 201, created.text
        listed = await http.get("/conversations")
        assert [c["id"] for c in listed.json()["items"]] == [created.json()["id"]], listed.text


def _readme_agent_api() -> tuple[set[str], list[tuple[str, str]]]:
    """From the README's Agent Service paragraph: the paths it says need no key, and every endpoint."""
    # The paragraph whose first line says which paths are open: not the settings table of the same name.
    pattern = r"^\*\*Agent Service\*\* \(([^\n]*?)\):(.*?)\n\n"
    paragraph = re.search(pattern, README.read_text(), re.DOTALL | re.MULTILINE)
    assert paragraph, "no Agent Service paragraph in README.md"
    return set(re.findall(r"`(/\w+)`", paragraph[1])), re.findall(r"`(GET|POST) (/[^`]*)`", paragraph[2])


async def test_agent_endpoints_the_readme_calls_open_need_no_key_and_the_rest_do(make_run: MakeRun) -> None:
    documented_open, endpoints = _readme_agent_api()
    dev = dict(line.split("=", 1) for line in (REPO_ROOT / "var" / "dev-secrets.env").read_text().split())
    key = {"X-API-Key": dev["DEV_AGENT_API_KEY"]}
    opened = set()
    async with httpx.AsyncClient(base_url=make_run.agent_url, timeout=10) as http:
        for method, path in endpoints:
            url = path.replace("{id}", "no-such-session")
            body = {} if method == "POST" else None
            anonymous = await http.request(method, url, json=body)
            if anonymous.status_code != 401:
                assert anonymous.status_code == 200, (method, path, anonymous.text)
                opened.add(path)
            assert (await http.request(method, url, json=body, headers=key)).status_code != 401, path
    # Probes are open on purpose: orchestrators and Prometheus call them without a key.
    assert opened == documented_open
    assert {"/health", "/ready", "/metrics"} <= opened


async def test_sigterm_stops_both_services_with_exit_code_0(make_run: MakeRun) -> None:
    rest = await make_run.stop()
    assert make_run.proc.returncode == 0, rest
    async with httpx.AsyncClient(timeout=2) as http:
        for url in (make_run.chat_url, make_run.agent_url):
            with pytest.raises(httpx.ConnectError):
                await http.get(f"{url}/health")
