"""What authenticating one chat request costs, by credential: a development HS256 token, the identity
provider's RS256 and ES256 access tokens (keys cached: the steady state), and the page's session
cookie (one read of ``auth_sessions``; SQLite or PostgreSQL).

It runs the ConversationService's own ``Authentication`` (built by its lifespan) against the tests'
OpenID Provider (oidc-provider on loopback, ``tests/oidc_provider``; Node.js needed), one call at a
time on one event loop, and prints p50/p95/p99 per credential.

    .venv/bin/python -m loadtests.bench_auth [--db postgres] [--calls 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

from starlette.requests import Request

from conversation_service.app import create_app
from conversation_service.auth.authenticator import DevelopmentTokens, user_of
from conversation_service.auth.login import SignedIn
from loadtests.common import databases, machine, summarize_seconds, work_dir, write_results
from tests.integration.conversation_service.auth.support import chat_settings
from tests.support.oidc_provider import ES_TESTER, ProviderConfig, running_provider

RESULTS = Path(__file__).parent / "results"
SECRET = "bench-secret-for-development-tokens-0123456789"


def _request(headers: dict[str, str]) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "method": "GET", "path": "/conversations", "headers": raw, "query_string": b""})


async def _time(call, calls: int) -> dict[str, Any]:
    for _ in range(200):  # warm: caches, the connection pool
        await call()
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return summarize_seconds(samples)


async def _measure(auth, provider, calls: int) -> dict[str, Any]:
    from conversation_service.auth.tokens import issue_token

    development = DevelopmentTokens(SECRET, leeway_s=5)
    dev_token = issue_token(SECRET, "alice", "acme")
    rs_tokens = await provider.user_tokens("alice")
    es_token = await provider.user_token("alice", ES_TESTER)
    verified = await auth.bearer.verifier.verify(rs_tokens["access_token"])
    secret = await auth.sessions.create(SignedIn(
        user=user_of(verified, leeway_s=0, name="Alice"), tokens=rs_tokens, access_expires_at=verified.expires_at))
    cookie = _request({"Cookie": f"{auth.sessions.cookie_name}={secret}"})
    return {
        "hs256_development_token": await _time(lambda: development.authenticate(dev_token), calls),
        "rs256_access_token": await _time(
            lambda: auth.request_user(_request({"Authorization": f"Bearer {rs_tokens['access_token']}"})), calls),
        "es256_access_token": await _time(
            lambda: auth.request_user(_request({"Authorization": f"Bearer {es_token}"})), calls),
        "session_cookie": await _time(lambda: auth.request_user(cookie), calls),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    root = work_dir("bench-auth")
    async with databases(args.db, ["chat"], root) as urls, \
            running_provider(root, ProviderConfig(chat_url="http://127.0.0.1:9")) as provider:
        settings = chat_settings(root, provider, login=True).model_copy(
            update={"conversation_database_url": urls["chat"]})
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            results = await _measure(app.state.auth, provider, args.calls)
    report = {"db": args.db, "calls": args.calls, "machine": machine(), "results": results}
    print(f"\nauthenticating one request ({args.db}, {args.calls} calls each, one at a time)")
    print(f"{'credential':28} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
    for name, row in results.items():
        print(f"{name:28} {row['p50_ms']:8.3f} {row['p95_ms']:8.3f} {row['p99_ms']:8.3f}")
    write_results(RESULTS / f"bench_auth-{args.db}.json", report)


if __name__ == "__main__":
    asyncio.run(main())
