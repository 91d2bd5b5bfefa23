"""A rolling upgrade with replies streaming, on PostgreSQL and Redis: the previous release (``PREVIOUS_RELEASE``,
from git, run from its sources in a virtual environment of its own) serves, this release's migrations run
under it, this release's replicas start beside it, and the old replicas are stopped with SIGTERM.

- The old replicas keep working on the migrated schema: replies that started before the migrations end
  complete on them, and a message sent after the migrations is answered by the old Agent Service.
- The old chat replica is stopped while replies stream (agent and direct): every reply completes, and its
  clients, resuming with ``after_seq`` on the new replica, see every frame once, in order, and the stored text.
- The old Agent Service is stopped once out of rotation (as Kubernetes drops a stopping pod from the
  Service's endpoints) and idle: a run under way on an Agent Service of the previous release told to stop
  ends ``INTERRUPTED`` (this release hands it over to be continued; docs/architecture.md, "Upgrades"), so a
  rollout from that release waits for it.

docs/architecture.md ("Upgrades") says the rule that makes this hold (expand, then contract), and
tests/unit/migrations/test_expand_contract.py holds each new migration to it.
"""

from __future__ import annotations

import asyncio
import subprocess
import tarfile
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.chaos.chat_support import (
    AGENT_KEY,
    SECRET,
    ChatClient,
    assert_once_in_order,
    assert_seqs_are_forever,
    is_end_of,
    new_conversation,
    reply_id,
    send,
    shown_text,
    stored_messages,
)
from tests.support.balancer import Balancer, running_balancer
from tests.support.databases import fresh_database
from tests.support.install import clean_env, environment
from tests.support.locks import RUNTIME_LOCK
from tests.support.servers import REPO_ROOT, ServiceProcess

# The last commit before issue 36's work: the release an operator upgrades from.
PREVIOUS_RELEASE = "810703e"
# Replies of a few seconds (the built-in model's fallback answer, about 60 chunks): long enough to be streaming
# when a replica stops, short enough to end within SHUTDOWN_GRACE_S (8 s).
PACE = {"LLM_PROVIDER": "builtin", "LLM_BUILTIN_FIRST_TOKEN_MS": "100", "LLM_BUILTIN_CHUNK_DELAY_MS": "45"}
AGENT_MESSAGE = "/agent tell me everything about the history of the lighthouse keepers of the northern coast"
DIRECT_MESSAGE = "tell me everything about the history of the lighthouse keepers of the northern coast"


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The previous release's sources (``git archive``) and a virtual environment with the runtime lock's
    packages, which it runs in from its sources (its own wheel lacks a dependency this release declares)."""
    where = tmp_path_factory.mktemp("previous-release")
    archive = where / "release.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "-C", str(REPO_ROOT), "archive", "--format=tar", PREVIOUS_RELEASE], stdout=out,
                       check=True, timeout=60)
    sources = where / "src"
    with tarfile.open(archive) as tar:
        tar.extractall(sources, filter="data")
    return sources, environment(where / "venv", RUNTIME_LOCK)


class Stack:
    """The services of one release or the other, on the same databases, Redis and agent balancer."""

    def __init__(self, tmp_path: Path, agent_db: str, chat_db: str, redis_url: str, balancer: Balancer) -> None:
        (tmp_path / "no-docs").mkdir(exist_ok=True)
        self.tmp_path, self.balancer = tmp_path, balancer
        prefix = f"taskforce-upgrade-{uuid.uuid4().hex[:8]}"
        self.agent_env = {
            **PACE, "AGENT_SERVICE_DATABASE_URL": agent_db, "AGENT_SERVICE_API_KEYS": AGENT_KEY,
            "AGENT_SERVICE_MIGRATE_ON_START": "false", "AGENT_SERVICE_KNOWLEDGE_DIR": str(tmp_path / "no-docs"),
            "REDIS_URL": redis_url, "OTEL_SDK_DISABLED": "true",
        }
        self.chat_env = {
            **PACE, "CONVERSATION_DATABASE_URL": chat_db, "AGENT_SERVICE_URL": balancer.url,
            "AGENT_SERVICE_API_KEY": AGENT_KEY, "AUTH_JWT_SECRET": SECRET, "MIGRATE_ON_START": "false",
            "REDIS_URL": redis_url, "REDIS_CHANNEL_PREFIX": prefix, "TURN_LEASE_S": "3", "TURN_SWEEP_INTERVAL_S": "0.5",
            "AGENT_RECONNECT_DELAYS_S": "0.2,0.5,1", "OTEL_SDK_DISABLED": "true",
        }

    def _release(self, release: tuple[Path, Path] | None) -> dict[str, Any]:
        if release is None:  # this release: the checkout's sources and interpreter
            return {"extra": {}, "options": {}}
        sources, python = release
        return {"extra": {"PYTHONPATH": str(sources)}, "options": {"python": python, "cwd": sources}}

    async def migrate(self, release: tuple[Path, Path] | None) -> None:
        chosen = self._release(release)
        python = str(chosen["options"].get("python", ServiceProcess("x", {}).python))
        for module, env in (("agent_service", self.agent_env), ("conversation_service", self.chat_env)):
            done = await asyncio.to_thread(
                subprocess.run, [python, "-m", module, "migrate"], cwd=chosen["options"].get("cwd", REPO_ROOT),
                env=clean_env(**env, **chosen["extra"]), capture_output=True, text=True, timeout=120, check=False)
            assert done.returncode == 0, done.stderr[-3000:]

    async def start(self, release: tuple[Path, Path] | None) -> tuple[ServiceProcess, ServiceProcess]:
        chosen = self._release(release)
        agent = ServiceProcess("agent_service", {**self.agent_env, **chosen["extra"]}, **chosen["options"])
        await agent.start(self.tmp_path)
        self.balancer.rotation.append(agent.port)
        chat = ServiceProcess("conversation_service", {**self.chat_env, **chosen["extra"]}, **chosen["options"])
        await chat.start(self.tmp_path)
        return agent, chat


async def _wave(chat_url: str, *contents: str) -> list[tuple[ChatClient, str]]:
    """New conversations, each with a client on ``chat_url`` and one message sent; once each reply streams."""
    sent = []
    for content in contents:
        client = ChatClient(await new_conversation(chat_url))
        await client.connect(chat_url)
        sent.append((client, (await send(chat_url, client.cid, content))["message_id"]))
    for client, user_id in sent:
        await client.wait_for(lambda f, c=client, u=user_id: f["type"] == "message.delta"
                              and f["data"]["message_id"] == reply_id(c.frames, u), 30)
    return sent


async def _completed(chat_url: str, turns: list[tuple[ChatClient, str]]) -> None:
    """Every reply completed: its end frame, the text the client shows, and what is stored, all the same."""
    for client, user_id in turns:
        end = await client.wait_for(lambda f, c=client, u=user_id: is_end_of(f, reply_id(c.frames, u)), 40)
        assert end["type"] == "message.completed", end
        reply = reply_id(client.frames, user_id)
        assert shown_text(client.frames, reply) == end["data"]["content"] and len(end["data"]["content"]) > 100
        assert_once_in_order(client.frames)
        stored = {m["id"]: m for m in await stored_messages(chat_url, client.cid)}[reply]
        assert stored["status"] == "complete" and stored["content"] == end["data"]["content"]


async def _metric(agent: ServiceProcess, name: str) -> float:
    """A metric of one Agent Service process, read from its /metrics."""
    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(f"{agent.url}/metrics")).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.split("{")[0].split(" ")[0] == name)


@pytest.mark.timeout(170)
async def test_a_rolling_upgrade_with_replies_streaming(
    previous_release: tuple[Path, Path], postgres_url: str, redis_url: str, tmp_path: Path,
) -> None:
    async with fresh_database("postgres", tmp_path, "upgrade_chat") as chat_db, running_balancer() as balancer:
        stack = Stack(tmp_path, postgres_url, chat_db, redis_url, balancer)
        await stack.migrate(previous_release)
        old_agent, old_chat = await stack.start(previous_release)
        new_agent = new_chat = None
        try:
            async with httpx.AsyncClient(timeout=10) as http:  # the previous release's code (no chat /ready then)
                assert (await http.get(f"{old_chat.url}/ready")).status_code == 404
            before = await _wave(old_chat.url, AGENT_MESSAGE, DIRECT_MESSAGE)
            # This release's migrations, under the old replicas' streams; then its replicas beside them.
            await stack.migrate(None)
            new_agent, new_chat = await stack.start(None)
            # The old replicas on the migrated schema: the replies under way end there, and a new message
            # sent to the old chat is run by the old Agent Service (first in rotation).
            runs_before = await _metric(old_agent, "agent_runs_started_total")
            after_migration = await _wave(old_chat.url, AGENT_MESSAGE)
            await _completed(old_chat.url, before + after_migration)
            assert await _metric(old_agent, "agent_runs_started_total") == runs_before + 1

            # The old Agent Service leaves the rotation and, idle, is stopped; the old chat is stopped while
            # its replies stream, run by the new Agent Service.
            balancer.remove(old_agent.port)
            during = await _wave(old_chat.url, AGENT_MESSAGE, AGENT_MESSAGE, DIRECT_MESSAGE)
            assert await _metric(old_agent, "agent_runs_in_flight") == 0
            await old_agent.stop()
            await old_chat.stop()
            assert old_agent.proc.returncode == 0 and old_chat.proc.returncode == 0, old_chat.logs()[-3000:]
            for client, _ in during:
                await client.close()
                await client.connect(new_chat.url, resume=True)
            await _completed(new_chat.url, during)
            assert all(client.resumed_at for client, _ in during)

            # The new release alone; every client's frames are the ones a fresh replay gives.
            await _completed(new_chat.url, await _wave(new_chat.url, AGENT_MESSAGE))
            for client, _ in before + after_migration + during:
                replay = ChatClient(client.cid)
                await replay.connect(new_chat.url, resume=True)
                await replay.wait_for(lambda f, upto=client.last_seq: f["seq"] >= upto, 10)
                await replay.close()
                assert_seqs_are_forever(client.frames, replay.frames)
                await client.close()
        finally:
            for process in (old_chat, old_agent, new_chat, new_agent):
                if process is not None:
                    await process.stop()
