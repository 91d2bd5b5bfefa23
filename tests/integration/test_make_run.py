"""``make run`` (``deploy/run_local.py``): both services come up on the embedded defaults, the
printed chat URL and development token work, an agent message is answered, and Ctrl-C (SIGTERM)
stops everything cleanly. Runs the script as a newcomer would, on free ports and fresh SQLite files."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from urllib.parse import parse_qs, urlsplit

import httpx
import orjson
import websockets

from tests.support.servers import REPO_ROOT, free_port


async def _read_until(stream: asyncio.StreamReader, marker: str, timeout: float) -> list[str]:
    lines: list[str] = []
    async with asyncio.timeout(timeout):
        while True:
            line = (await stream.readline()).decode()
            if not line:
                raise AssertionError("run_local.py ended early:\n" + "".join(lines))
            lines.append(line)
            if marker in line:
                return lines


async def test_make_run_serves_the_product_on_its_defaults(tmp_path) -> None:
    chat_port, agent_port = free_port(), free_port()
    env = {
        **os.environ,
        "AGENT_SERVICE_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'agent.db'}",
        "CONVERSATION_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'chat.db'}",
        "AGENT_SERVICE_KNOWLEDGE_DIR": str(tmp_path / "knowledge"),
        "PYTHONUNBUFFERED": "1",
    }
    for name in ("LLM_PROVIDER", "REDIS_URL", "AGENT_SERVICE_URL", "AUTH_JWT_SECRET", "AGENT_SERVICE_API_KEYS",
                 "AGENT_SERVICE_API_KEY"):
        env.pop(name, None)  # the embedded defaults, as on a fresh machine
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "deploy/run_local.py", "--chat-port", str(chat_port), "--agent-port", str(agent_port),
        cwd=REPO_ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    assert proc.stdout is not None
    try:
        lines = await _read_until(proc.stdout, "dev token for user", timeout=120)
        page = next(line for line in lines if "chat page:" in line).split("chat page:", 1)[1].strip()
        token = parse_qs(urlsplit(page).query)["token"][0]
        chat_url = page.split("/?", 1)[0]
        assert chat_url == f"http://127.0.0.1:{chat_port}"
        headers = {"Authorization": f"Bearer {token}"}
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
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        rest, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, rest.decode()
