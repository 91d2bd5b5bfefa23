"""The identity provider's keys as the chat sees them: rotation, a provider that is down, a start-up
that does not wait for it. Against a real OpenID Provider on loopback."""

from __future__ import annotations

import asyncio
import time

import httpx
import jwt

from tests.integration.conversation_service.auth.support import chat_settings, chat_with_provider
from tests.integration.conversation_service.support import running
from tests.support.oidc_provider import CHAT_AUDIENCE, OpenIDProvider, make_key, make_keys, running_provider


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _fetches(metrics: str, result: str) -> float:
    prefix = f'conversation_oidc_jwks_fetches_total{{result="{result}"}}'
    return float(next(line for line in metrics.splitlines() if line.startswith(prefix)).split()[-1])


async def _wait_for_keys(http: httpx.AsyncClient) -> None:
    """Until the start-up's background fetch of the provider's keys has finished."""
    async with asyncio.timeout(15):
        while _fetches((await http.get("/metrics")).text, "ok") < 1:
            await asyncio.sleep(0.02)


async def test_a_rotated_key_is_fetched_once_for_a_hundred_requests(tmp_path) -> None:
    async with running_provider(tmp_path) as provider, chat_with_provider(tmp_path, provider) as (url, _app), \
            httpx.AsyncClient(base_url=url) as http:
        old_token = await provider.user_token("alice")
        assert (await http.get("/conversations", headers=bearer(old_token))).status_code == 200
        # The provider rotates: a new RS256 key signs from now on; the old keys are still published.
        rotated = make_key("RS256", kid="rotated-rs256")
        await provider.restart(keys=[rotated, *provider.keys])
        new_token = await provider.user_token("alice")
        assert jwt.get_unverified_header(new_token)["kid"] == "rotated-rs256"
        assert await provider.jwks_fetches() == 0
        answers = await asyncio.gather(*(http.get("/conversations", headers=bearer(new_token)) for _ in range(100)))
        assert [a.status_code for a in answers] == [200] * 100
        # One fetch of the key set for all of them: the unknown key id made one refetch, shared.
        assert await provider.jwks_fetches() == 1
        # Known from now on: no more fetches; the old key's tokens still verify.
        assert (await http.get("/conversations", headers=bearer(new_token))).status_code == 200
        assert (await http.get("/conversations", headers=bearer(old_token))).status_code == 200
        assert await provider.jwks_fetches() == 1


async def test_made_up_key_ids_refetch_at_most_once_per_cooldown(tmp_path) -> None:
    async with running_provider(tmp_path) as provider, \
            chat_with_provider(tmp_path, provider, jwks_refetch_cooldown_s=60) as (url, _app), \
            httpx.AsyncClient(base_url=url) as http:
        await _wait_for_keys(http)
        assert await provider.jwks_fetches() == 1  # the start-up's
        for attempt in range(20):
            forged = provider.sign(provider.claims(), key=make_key("RS256", kid=f"made-up-{attempt}"))
            assert (await http.get("/conversations", headers=bearer(forged))).status_code == 401
        assert await provider.jwks_fetches() == 2


async def test_tokens_signed_with_cached_keys_work_while_the_provider_is_down(tmp_path) -> None:
    # The key set is "stale" at once: every request would refresh it, and the provider is away.
    async with running_provider(tmp_path) as provider, \
            chat_with_provider(tmp_path, provider, jwks_cache_s=0, jwks_refetch_cooldown_s=0) as (url, _app), \
            httpx.AsyncClient(base_url=url) as http:
        rs_token, es_token = await provider.user_token("alice"), provider.sign(provider.claims(), alg="ES256")
        assert (await http.get("/conversations", headers=bearer(rs_token))).status_code == 200
        await provider.stop()
        for _ in range(3):
            for token in (rs_token, es_token):
                answer = await asyncio.wait_for(http.get("/conversations", headers=bearer(token)), timeout=5)
                assert answer.status_code == 200
        # Each request found the keys stale and had them refreshed behind it, in vain.
        assert _fetches((await http.get("/metrics")).text, "error") >= 2
        # A key it never had cannot be checked without the provider: 503, not a wrong 401.
        stranger = provider.sign(provider.claims(), key=make_key("RS256", kid="rotated-while-down"))
        unknown = await http.get("/conversations", headers=bearer(stranger))
        assert unknown.status_code == 503 and unknown.headers["retry-after"]


class BlackHole:
    """A provider that accepts connections and never answers."""

    def __init__(self) -> None:
        self.connections = 0
        self._server: asyncio.AbstractServer | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _accept(self, _reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.append(writer)

    async def __aexit__(self, *_exc: object) -> None:
        for writer in self._writers:
            writer.transport.abort()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()


async def test_start_up_does_not_wait_for_a_provider_that_does_not_answer(tmp_path) -> None:
    hole = BlackHole()
    async with hole as issuer:
        settings = chat_settings(tmp_path, issuer, http_timeout_s=30)
        started = time.monotonic()
        async with running(settings) as (url, _app), httpx.AsyncClient(base_url=url) as http:
            assert time.monotonic() - started < 5
            assert (await http.get("/health")).status_code == 200
            assert (await http.get("/auth/session")).json()["mode"] == "oidc"
            assert hole.connections == 1  # discovery was asked, and still waits for its answer


async def test_a_provider_never_reached_answers_503(tmp_path) -> None:
    provider = OpenIDProvider(tmp_path, keys=make_keys())  # never started: its port refuses connections
    token = provider.sign(provider.claims(audience=CHAT_AUDIENCE))
    async with chat_with_provider(tmp_path, provider, http_timeout_s=2) as (url, _app), \
            httpx.AsyncClient(base_url=url) as http:
        answer = await asyncio.wait_for(http.get("/conversations", headers=bearer(token)), timeout=10)
        assert answer.status_code == 503 and answer.json()["error"] == "unavailable"
        assert answer.headers["retry-after"]
