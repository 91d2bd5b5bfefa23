"""What a process pays for at start: the Agent Service's app imports only what its configured features
need. PyJWT and cryptography (an identity provider), the Redis client (a Redis URL) and the tokenizer
(loaded by the service's start-up itself, never by an import: the operator's CLI and a migration
count no tokens) each cost every process megabytes of RSS; each is imported where its feature is
built. Checked in a fresh interpreter: this test process has imported everything already."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from tests.support.servers import REPO_ROOT

LOADED = """
import json, sys
from agent_service.app import create_app
from agent_service.settings import AgentServiceSettings
create_app(AgentServiceSettings(api_keys=["k"]))
import agent_service.__main__
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def printed(program: str) -> Any:
    """What ``program``, run in a fresh interpreter, printed last (as JSON)."""
    done = subprocess.run([sys.executable, "-c", program], check=False, capture_output=True, text=True, cwd=REPO_ROOT,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_agent_app_imports_no_identity_provider_redis_or_tokenizer_code() -> None:
    loaded = set(printed(LOADED))
    assert "agent_service" in loaded and "fastapi" in loaded  # the program did import the app
    assert {"jwt", "redis", "bpe_openai"}.isdisjoint(loaded), sorted({"jwt", "redis", "bpe_openai"} & loaded)


def test_the_tokenizer_keeps_only_the_encoding_it_built() -> None:
    # bpe-openai reads all its vocabularies at import and caches them; get_encoding drops those caches.
    program = """
import json
from bpe_openai import registry
from shared.tokens import count_tokens, get_encoding
counts = [count_tokens("hello world"), count_tokens("The quick brown fox jumps over the lazy dog.")]
cached = registry._load_mergeable_ranks.cache_info().currsize + sum(
    c.cache_info().currsize for c in registry.ENCODING_CONSTRUCTORS.values())
other = len(get_encoding("o200k_base").encode_ordinary("hello world"))
print(json.dumps([counts, cached, other]))
"""
    counts, cached, other = printed(program)
    assert counts == [2, 10]  # cl100k_base, as OpenAI's tiktoken counts them
    assert cached == 0
    assert other == 2  # another encoding asked for later is read again
