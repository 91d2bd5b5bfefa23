"""What ships is what is tested: the wheel, installed without extras into a fresh virtual environment outside
the checkout (as the Dockerfile installs it), imports every module, migrates both databases, starts both
services and answers a delegated message end to end. A dependency that only the test extras bring in (as
``cryptography`` once was) fails here, not in an operator's crash-looping container."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import httpx
import orjson
import pytest
import websockets
from packaging.utils import canonicalize_name

from conversation_service.auth.tokens import issue_token
from tests.support.install import build_wheel, clean_env, install
from tests.support.locks import RUNTIME_LOCK, read_lock
from tests.support.servers import ServiceProcess

SECRET = "plain-install-secret-0123456789abcdef0123456789"
AGENT_KEY = "plain-install-agent-key-0123456789"
PACKAGES = ("shared", "agent_service", "conversation_service")

# Run by the installed interpreter in isolated mode (-I: no checkout on sys.path, no PYTHON* variables).
IMPORT_EVERY_MODULE = f"""
import importlib, json, pkgutil, sys
found, failed = {{}}, {{}}
for top in {PACKAGES!r}:
    package = importlib.import_module(top)
    found[top] = package.__file__
    for module in pkgutil.walk_packages(package.__path__, top + "."):
        try:
            found[module.name] = importlib.import_module(module.name).__file__
        except BaseException as exc:
            failed[module.name] = repr(exc)
print(json.dumps({{"found": found, "failed": failed}}))
"""
LIST_DISTRIBUTIONS = (
    "import importlib.metadata as m, json; print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The installed environment's python (built and installed once for this module's tests)."""
    where = tmp_path_factory.mktemp("plain-install")
    return install(build_wheel(where / "build"), where / "venv", lock=RUNTIME_LOCK)


def test_every_module_imports_from_the_installed_wheel(installed: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [str(installed), "-I", "-c", IMPORT_EVERY_MODULE], cwd=tmp_path, env=clean_env(),
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["failed"] == {}, report["failed"]
    site = str(installed.parent.parent)
    outside = {name: file for name, file in report["found"].items() if not file.startswith(site)}
    assert outside == {}, "modules imported from outside the installed environment"
    # Every package of the project, not a handful: the walk reached the deep modules too.
    assert {"conversation_service.app", "agent_service.app", "conversation_service.auth.sealing"} <= set(report["found"])


def test_the_environment_holds_the_locked_versions_and_nothing_else(installed: Path, tmp_path: Path) -> None:
    """What the image runs: the runtime lock's packages at their versions, the project, nothing more (no
    installer or build backend either: the environment is made without pip, as in the Dockerfile)."""
    listed = subprocess.run(
        [str(installed), "-I", "-c", LIST_DISTRIBUTIONS], check=False, cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=60,
    )
    assert listed.returncode == 0, listed.stderr[-3000:]
    found = {canonicalize_name(name): version for name, version in json.loads(listed.stdout).items()}
    locked = {name: entry.version for name, entry in read_lock(RUNTIME_LOCK).items() if entry.applies()}
    assert found.pop("taskforce-bridge") == "0.1.0"
    assert found == locked


async def test_the_installed_services_migrate_start_and_answer_a_delegated_message(
    installed: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    (run / "docs").mkdir(parents=True)
    agent_env = clean_env(
        AGENT_SERVICE_DATABASE_URL=f"sqlite+aiosqlite:///{run}/agent.db", AGENT_SERVICE_API_KEYS=AGENT_KEY,
        AGENT_SERVICE_MIGRATE_ON_START="false", AGENT_SERVICE_KNOWLEDGE_DIR=str(run / "docs"),
        LLM_PROVIDER="builtin",
    )
    chat_env = clean_env(
        CONVERSATION_DATABASE_URL=f"sqlite+aiosqlite:///{run}/chat.db", AGENT_SERVICE_API_KEY=AGENT_KEY,
        AUTH_JWT_SECRET=SECRET, MIGRATE_ON_START="false", LLM_PROVIDER="builtin",
    )
    # Migrated explicitly, as an operator (or the migration Job) does before starting replicas.
    for module, env in (("agent_service", agent_env), ("conversation_service", chat_env)):
        done = await asyncio.create_subprocess_exec(
            str(installed), "-m", module, "migrate", cwd=run, env=env, stderr=asyncio.subprocess.PIPE,
        )
        _, stderr = await asyncio.wait_for(done.communicate(), 120)
        assert done.returncode == 0, stderr.decode()[-3000:]

    agent = ServiceProcess("agent_service", agent_env, python=installed, cwd=run)
    probe = [str(installed), "-m", "shared.healthcheck"]
    closed = await asyncio.to_thread(subprocess.run, [*probe, "http://127.0.0.1:9/health"], check=False, env=clean_env(),
                                     capture_output=True, timeout=30)
    assert closed.returncode == 1
    await agent.start(run)
    chat = ServiceProcess("conversation_service", {**chat_env, "AGENT_SERVICE_URL": agent.url}, python=installed, cwd=run)
    try:
        await chat.start(run)
        # The image's HEALTHCHECK command, run by the installed interpreter against both services.
        for url in (agent.url, chat.url):
            checked = await asyncio.to_thread(subprocess.run, [*probe, f"{url}/health"], check=False, env=clean_env(),
                                              capture_output=True, text=True, timeout=30)
            assert checked.returncode == 0, checked.stdout
        headers = {"Authorization": f"Bearer {issue_token(SECRET, 'alice', 'acme', ttl_s=600)}"}
        async with httpx.AsyncClient(base_url=chat.url, headers=headers, timeout=30) as http:
            created = await http.post("/conversations", json={"title": "installed"})
            assert created.status_code == 201, created.text
            cid = created.json()["id"]
            ws_url = chat.url.replace("http://", "ws://") + f"/conversations/{cid}/ws"
            async with websockets.connect(ws_url, additional_headers=headers) as ws:
                sent = await http.post(f"/conversations/{cid}/messages", json={"content": "/agent what is 17*23"})
                assert sent.status_code == 202 and sent.json()["route"]["target"] == "agent", sent.text
                frames: list[dict] = []
                async with asyncio.timeout(60):
                    while not frames or frames[-1]["type"] not in ("agent.complete", "agent.error"):
                        frames.append(orjson.loads(await ws.recv()))
        assert frames[-1]["type"] == "agent.complete", frames[-1]
        answers = [f["data"]["content"] for f in frames if f["type"] == "message.completed"]
        assert len(answers) == 1 and "391" in answers[0], answers
    finally:
        await chat.stop()
        await agent.stop()
