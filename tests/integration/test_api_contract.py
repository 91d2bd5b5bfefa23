"""Both services answer what their OpenAPI documents say: a bounded schemathesis run against real
servers on loopback (SQLite), the chat service delegating to the Agent Service as in production.

Checks: no 5xx, every status, content type, header and body documented and conforming, a request
the schema allows is not refused as malformed, and a 405 names the methods the path has. About 30
generated requests per operation and phase, from a fixed seed so that a failure can be replayed.
Reproduce by hand against ``make run``::

    schemathesis --config-file tests/integration/schemathesis.toml run http://127.0.0.1:8001/openapi.json \\
        -H "X-API-Key: <AGENT_SERVICE_API_KEYS>" --checks <CHECKS below> -n 30
"""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import httpx
import pytest

from agent_service.app import create_app as create_agent_app
from agent_service.settings import AgentServiceSettings
from conversation_service.app import create_app as create_chat_app
from conversation_service.auth.tokens import issue_token
from conversation_service.settings import ConversationSettings
from shared.llm.builtin import BuiltinProvider
from tests.support.servers import serve_app

CONFIG = Path(__file__).with_name("schemathesis.toml")
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "positive_data_acceptance",
    "allow_header_conformance",
)
AGENT_KEY = "contract-test-agent-key"
JWT_SECRET = "contract-test-secret-for-the-chat-service-0123456789"
RUN_TIMEOUT_S = 150


async def _schemathesis(openapi_url: str, header: str, workdir: Path) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "schemathesis.cli", "--config-file", str(CONFIG), "run", openapi_url,
        "--header", header, "--checks", ",".join(CHECKS), "--max-examples", "30", "--seed", "20261124",
        "--workers", "1", "--request-timeout", "20", "--no-color", "--output-truncate", "true",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        cwd=workdir,  # where it keeps its cache
    )
    try:
        output, _ = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return proc.returncode or 0, output.decode(errors="replace")


@pytest.fixture
async def services(tmp_path: Path):
    agent_settings = AgentServiceSettings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'agent.db'}", api_keys=[AGENT_KEY], migrate_on_start=True,
    )
    agent = create_agent_app(agent_settings, provider=BuiltinProvider(first_token_delay=0, chunk_delay=0))
    async with serve_app(agent) as agent_url:
        chat = create_chat_app(ConversationSettings(
            conversation_database_url=f"sqlite+aiosqlite:///{tmp_path / 'chat.db'}", migrate_on_start=True,
            auth_jwt_secret=JWT_SECRET, redis_url=None, agent_service_url=agent_url, agent_service_api_key=AGENT_KEY,
        ))
        async with serve_app(chat) as chat_url:
            yield agent_url, chat_url


async def test_both_services_answer_as_their_openapi_documents_say(services: tuple[str, str], tmp_path: Path) -> None:
    agent_url, chat_url = services
    operations = {}
    async with httpx.AsyncClient() as client:
        for name, url in (("agent_service", agent_url), ("conversation_service", chat_url)):
            document = (await client.get(f"{url}/openapi.json")).json()
            operations[name] = sum(len(methods) for methods in document["paths"].values())
    token = issue_token(JWT_SECRET, "alice", "acme", ttl_s=3600)
    for name, url, header in (
        ("agent_service", agent_url, f"X-API-Key: {AGENT_KEY}"),
        ("conversation_service", chat_url, f"Authorization: Bearer {token}"),
    ):
        code, output = await _schemathesis(f"{url}/openapi.json", header, tmp_path)
        assert code == 0, f"{name} does not answer as its OpenAPI document says:\n{output[-12_000:]}"
        # Every operation of the document was exercised, not skipped.
        tested = re.search(r"Tested: (\d+)", output)
        assert tested is not None and int(tested.group(1)) == operations[name], output[-4_000:]
