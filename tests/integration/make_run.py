"""Run ``deploy/run_local.py`` (what ``make run`` runs) as a newcomer would: fresh SQLite files, free
ports, none of the variables a developer may have set, and its output read line by line."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from tests.support.servers import REPO_ROOT, free_port

# Set on a developer's machine or CI, they would replace what make run generates.
_NOT_INHERITED = ("LLM_PROVIDER", "REDIS_URL", "AGENT_SERVICE_URL", "AUTH_JWT_SECRET", "AGENT_SERVICE_API_KEYS",
                  "AGENT_SERVICE_API_KEY", "CHAT_PORT", "AGENT_PORT")


def fresh_env(tmp_path: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "AGENT_SERVICE_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'agent.db'}",
        "CONVERSATION_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'chat.db'}",
        "AGENT_SERVICE_KNOWLEDGE_DIR": str(tmp_path / "knowledge"),
        "PYTHONUNBUFFERED": "1",
    }
    for name in _NOT_INHERITED:
        env.pop(name, None)
    return env


@dataclass
class MakeRun:
    proc: asyncio.subprocess.Process
    chat_port: int
    agent_port: int
    lines: list[str] = field(default_factory=list)

    @property
    def chat_url(self) -> str:
        return f"http://127.0.0.1:{self.chat_port}"

    @property
    def agent_url(self) -> str:
        return f"http://127.0.0.1:{self.agent_port}"

    @property
    def token(self) -> str:
        """The development token in the printed chat page URL."""
        page = next(line for line in self.lines if "chat page:" in line).split("chat page:", 1)[1].strip()
        return parse_qs(urlsplit(page).query)["token"][0]

    async def read_until(self, marker: str, timeout: float = 120) -> list[str]:
        """Output lines up to the first one containing ``marker``."""
        assert self.proc.stdout is not None
        start = len(self.lines)
        async with asyncio.timeout(timeout):
            while True:
                line = (await self.proc.stdout.readline()).decode()
                if not line:
                    raise AssertionError("run_local.py ended early:\n" + "".join(self.lines))
                self.lines.append(line)
                if marker in line:
                    return self.lines[start:]

    async def stop(self) -> str:
        """SIGTERM, as Ctrl-C; the rest of the output."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        rest, _ = await asyncio.wait_for(self.proc.communicate(), 60)
        return rest.decode()


async def start_make_run(env: dict[str, str], chat_port: int | None = None,
                         agent_port: int | None = None) -> MakeRun:
    chat_port, agent_port = chat_port or free_port(), agent_port or free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "deploy/run_local.py", "--chat-port", str(chat_port), "--agent-port", str(agent_port),
        cwd=REPO_ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    return MakeRun(proc, chat_port, agent_port)
