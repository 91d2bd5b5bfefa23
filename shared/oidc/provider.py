"""One identity provider: its discovery document and its signing keys, cached.

The keys are read from the provider's ``jwks_uri`` (found through discovery) and kept for
``jwks_cache_s``. Nothing a request needs waits on the provider when a cached key answers: a stale
key set is refreshed in the background and used meanwhile, so a provider that is down rejects no
token signed with a key we have. Only a key id we do not know makes a request wait, for one fetch
that every request waiting on it shares (single flight), and at most once per cooldown: key ids
made up by an attacker cost the provider one fetch per cooldown, not one per request.

Start-up asks the provider in the background (``start``): a provider that is down or slow does not
hold the service's start-up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
from jwt import PyJWK
from jwt.exceptions import PyJWKError

from shared.oidc.errors import ProviderUnavailable
from shared.oidc.settings import OIDCSettings, check_provider_url

log = logging.getLogger(__name__)

MAX_DOCUMENT_BYTES = 512 * 1024
MAX_KEYS = 100


@dataclass(frozen=True, slots=True)
class ProviderMetadata:
    """What discovery says (only what the services use)."""

    issuer: str
    jwks_uri: str
    authorization_endpoint: str | None = None
    token_endpoint: str | None = None
    end_session_endpoint: str | None = None
    revocation_endpoint: str | None = None
    code_challenge_methods: tuple[str, ...] = ()

    @classmethod
    def parse(cls, document: Any, issuer: str) -> ProviderMetadata:
        if not isinstance(document, dict):
            raise ProviderUnavailable("the discovery document is not a JSON object")
        if document.get("issuer") != issuer:
            # OpenID Connect Discovery 4.3: a document naming another issuer must not be used.
            raise ProviderUnavailable(f"the discovery document names another issuer than {issuer}")

        def url(name: str, required: bool = False) -> str | None:
            value = document.get(name)
            if value is None and not required:
                return None
            if not isinstance(value, str):
                raise ProviderUnavailable(f"the discovery document has no valid {name}")
            try:
                return check_provider_url(value, name)
            except ValueError as exc:
                raise ProviderUnavailable(str(exc)) from None

        methods = document.get("code_challenge_methods_supported") or []
        return cls(
            issuer=issuer, jwks_uri=url("jwks_uri", required=True) or "",
            authorization_endpoint=url("authorization_endpoint"), token_endpoint=url("token_endpoint"),
            end_session_endpoint=url("end_session_endpoint"), revocation_endpoint=url("revocation_endpoint"),
            code_challenge_methods=tuple(m for m in methods if isinstance(m, str)) if isinstance(methods, list) else (),
        )


def discovery_url(issuer: str) -> str:
    return issuer.rstrip("/") + "/.well-known/openid-configuration"


@dataclass(frozen=True, slots=True)
class ProviderKey:
    """One signing key: its JWK members that constrain its use, and the key itself."""

    kty: str
    alg: str | None
    crv: str | None
    key: Any


def parse_key_set(document: Any) -> dict[str, ProviderKey]:
    """The signing keys of a JWKS by key id (keys for encryption, or of kinds we cannot use, left out)."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise ProviderUnavailable("the JWKS is not a JSON object with keys")
    keys: dict[str, ProviderKey] = {}
    for index, entry in enumerate(document["keys"][:MAX_KEYS]):
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig" or entry.get("kty") not in ("RSA", "EC"):
            continue
        try:
            key = PyJWK(entry).key
        except PyJWKError:
            continue
        kid = entry.get("kid")
        alg, crv = entry.get("alg"), entry.get("crv")
        keys[kid if isinstance(kid, str) else f"#{index}"] = ProviderKey(
            kty=entry["kty"], alg=alg if isinstance(alg, str) else None, crv=crv if isinstance(crv, str) else None,
            key=key,
        )
    return keys


class IdentityProvider:
    """Discovery and keys of one issuer. ``on_fetch(result)`` counts each key set fetch
    (``ok``/``error``)."""

    def __init__(
        self, settings: OIDCSettings, http: httpx.AsyncClient, *, clock: Callable[[], float] = time.monotonic,
        on_fetch: Callable[[str], None] | None = None,
    ) -> None:
        if not settings.issuer:
            raise ValueError("an IdentityProvider needs an issuer")
        self.issuer = settings.issuer
        self._settings = settings
        self._http = http
        self._clock = clock
        self._on_fetch = on_fetch or (lambda _result: None)
        self._metadata: ProviderMetadata | None = None
        self._keys: dict[str, ProviderKey] | None = None
        self._fetched_at = float("-inf")
        self._refetched_at = float("-inf")  # the last fetch for an unknown key id
        self._failed_at = float("-inf")
        self._inflight: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Fetch discovery and keys in the background (start-up does not wait for the provider)."""
        self._refresh()

    async def aclose(self) -> None:
        if self._inflight is not None:
            self._inflight.cancel()
            await asyncio.gather(self._inflight, return_exceptions=True)

    async def metadata(self) -> ProviderMetadata:
        if self._metadata is None:
            await self._wait_refresh()
        if self._metadata is None:
            raise ProviderUnavailable("the identity provider's discovery document could not be read")
        return self._metadata

    async def signing_key(self, kid: str | None) -> ProviderKey | None:
        """The key with this id, or None when the provider has none such. Waits for a fetch only for
        a key id not cached (and no more than once per cooldown)."""
        now = self._clock()
        cooldown = self._settings.jwks_refetch_cooldown_s
        stale = now - self._fetched_at >= self._settings.jwks_cache_s
        if self._keys is not None and stale and now - self._failed_at >= cooldown:
            self._refresh()  # used meanwhile, refreshed behind the request
        if self._keys is None:
            if self._inflight is not None or now - self._failed_at >= cooldown:
                await self._wait_refresh()
            if self._keys is None:
                raise ProviderUnavailable("the identity provider's keys could not be read")
        found = self._find(kid)
        if found is not None:
            return found
        if self._inflight is None and now - max(self._refetched_at, self._failed_at) < cooldown:
            if self._failed_at > self._fetched_at:
                raise ProviderUnavailable("the identity provider's keys could not be refreshed")
            return None
        self._refetched_at = now
        await self._wait_refresh()
        found = self._find(kid)
        if found is None and self._failed_at > self._fetched_at:
            raise ProviderUnavailable("the identity provider's keys could not be refreshed")
        return found

    def _find(self, kid: str | None) -> ProviderKey | None:
        keys = self._keys or {}
        if kid is not None:
            return keys.get(kid)
        # No key id: only a provider with one signing key can be meant.
        return next(iter(keys.values())) if len(keys) == 1 else None

    def _refresh(self) -> asyncio.Task[None]:
        if self._inflight is None:
            self._inflight = asyncio.create_task(self._fetch(), name="oidc-jwks-fetch")
            self._inflight.add_done_callback(self._fetched)
        return self._inflight

    def _fetched(self, task: asyncio.Task[None]) -> None:
        if self._inflight is task:
            self._inflight = None

    async def _wait_refresh(self) -> None:
        # Shielded: a request that gives up does not cancel the fetch the others wait for.
        await asyncio.shield(self._refresh())

    async def _fetch(self) -> None:
        """One fetch; never raises (its outcome is the state it leaves: keys, or a failure time)."""
        try:
            if self._metadata is None or self._clock() - self._fetched_at >= self._settings.jwks_cache_s:
                self._metadata = ProviderMetadata.parse(await self._get(discovery_url(self.issuer)), self.issuer)
            keys = parse_key_set(await self._get(self._metadata.jwks_uri))
        except ProviderUnavailable as exc:
            self._failed(str(exc))
            return
        except (httpx.HTTPError, orjson.JSONDecodeError, OSError) as exc:
            self._failed(type(exc).__name__)
            return
        self._keys, self._fetched_at = keys, self._clock()
        self._on_fetch("ok")

    def _failed(self, why: str) -> None:
        self._failed_at = self._clock()
        self._on_fetch("error")
        log.warning("identity provider keys could not be fetched; cached keys are used",
                    extra={"issuer": self.issuer, "reason": why, "cached_keys": len(self._keys or {})})

    async def _get(self, url: str) -> Any:
        async with self._http.stream("GET", url, timeout=self._settings.http_timeout_s,
                                     headers={"Accept": "application/json"}) as response:
            if response.status_code != 200:
                raise ProviderUnavailable(f"the identity provider answered {response.status_code}")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_DOCUMENT_BYTES:
                    raise ProviderUnavailable("the identity provider's document is too large")
        return orjson.loads(bytes(body))
