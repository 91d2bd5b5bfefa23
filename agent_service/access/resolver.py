"""From a credential to its ``Caller``, in one place for every door (the API routes, both A2A bindings).

- An ``X-API-Key`` is one of ``AGENT_SERVICE_CALLERS`` (each with its name, kind, organisations and
  permissions; the key kept as its SHA-256 only), or a plain ``AGENT_SERVICE_API_KEYS`` entry: the
  full-trust service ``service`` (what every key was before callers had names; said at start-up).
  Every key is compared, in constant time, whichever matches.
- A bearer token is an access token of ``AGENT_SERVICE_AUTH_OIDC_ISSUER`` (never an ID token:
  ``shared.oidc.verifier``). It is a **service** when it is its client's own token (client credentials,
  no user behind it) and the client (``azp``, else ``client_id``) is in ``AGENT_SERVICE_AUTH_SERVICE_CLIENTS``,
  or when its permissions claim (roles, scope) holds ``AGENT_SERVICE_AUTH_SERVICE_ROLE``; an **agent** when
  it is the own token of a client in ``AGENT_SERVICE_AUTH_AGENT_CLIENTS``; otherwise it is a **user** token
  and acts only as its subject (a user signed in through an allowed client is still that user).
  A service or agent token that carries an organisation claim acts for that organisation only.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent_service.access.caller import ALL_PERMISSIONS, LEGACY_SERVICE, Caller, CallerKind, Permission
from agent_service.errors import IdentityProviderUnavailable, Unauthorized
from agent_service.settings import AgentServiceSettings, CallerKeySettings
from shared.oidc.errors import InvalidToken, ProviderUnavailable

if TYPE_CHECKING:
    # Only for annotations: the verifier brings PyJWT, which a service without an identity provider
    # configured does not load (app.build_token_verifier imports it when one is).
    from shared.oidc.verifier import AccessTokenVerifier, VerifiedToken

log = logging.getLogger(__name__)
ANY_ORG = "*"


def key_digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


@dataclass(frozen=True, slots=True)
class _Key:
    digest: bytes
    caller: Caller


def _configured(entry: CallerKeySettings) -> Caller:
    orgs = None if ANY_ORG in entry.orgs else frozenset(entry.orgs)
    return Caller(
        name=entry.name, kind=CallerKind(entry.kind), orgs=orgs,
        permissions=frozenset(Permission(p) for p in entry.permissions),
    )


LEGACY_CALLER = Caller(name=LEGACY_SERVICE, kind=CallerKind.SERVICE, orgs=None, permissions=ALL_PERMISSIONS)


class CallerResolver:
    def __init__(self, settings: AgentServiceSettings, verifier: AccessTokenVerifier | None) -> None:
        self._verifier = verifier
        self._keys = [_Key(bytes.fromhex(entry.key_sha256), _configured(entry)) for entry in settings.callers]
        self._keys += [_Key(key_digest(key), LEGACY_CALLER) for key in settings.api_keys]
        self._service_clients = frozenset(settings.auth_service_clients)
        self._agent_clients = frozenset(settings.auth_agent_clients)
        self._service_role = settings.auth_service_role

    @property
    def accepts_anything(self) -> bool:
        return bool(self._keys) or self._verifier is not None

    def describe(self) -> None:
        """Say at start-up who may call, the full-trust keys first: an operator must see them."""
        legacy = sum(key.caller is LEGACY_CALLER for key in self._keys)
        if legacy:
            log.warning(
                "AGENT_SERVICE_API_KEYS: %d plain key(s) act as the full-trust service %r, over every user's runs, "
                "tasks and memory; give each caller a name, organisations and permissions in AGENT_SERVICE_CALLERS",
                legacy, LEGACY_SERVICE,
            )
        for key in self._keys:
            if key.caller is not LEGACY_CALLER:
                caller = key.caller
                log.info("caller %r (%s) may act for %s with %s", caller.name, caller.kind.value,
                         "any organisation" if caller.orgs is None else ", ".join(sorted(caller.orgs)),
                         ", ".join(sorted(p.value for p in caller.permissions)))
        if not self.accepts_anything:
            log.warning("no API key, caller or identity provider is configured: every authenticated request is refused")

    def by_key(self, presented: str) -> Caller | None:
        digest = key_digest(presented)
        found = None
        # No early exit: the time taken does not tell which key (or how much of one) matched.
        for key in self._keys:
            if hmac.compare_digest(digest, key.digest):
                found = key.caller
        return found

    async def resolve(self, *, api_key: str | None, bearer: str | None) -> Caller:
        """The caller a request's credential names: a key, else a token, else ``Unauthorized``."""
        if api_key is not None:
            caller = self.by_key(api_key)
            if caller is None:
                raise Unauthorized("missing or invalid X-API-Key")
            return caller
        if bearer is not None and self._verifier is not None:
            try:
                return self._of_token(await self._verifier.verify(bearer))
            except InvalidToken as exc:
                raise Unauthorized(str(exc)) from None
            except ProviderUnavailable:
                raise IdentityProviderUnavailable("the identity provider cannot be reached to check the token") from None
        raise Unauthorized("missing or invalid X-API-Key" + (" or bearer token" if self._verifier is not None else ""))

    def _of_token(self, token: VerifiedToken) -> Caller:
        client = token.claims.get("azp") or token.claims.get("client_id")
        client = client if isinstance(client, str) and client else None
        own = client is not None and client_credentials(token, client)
        orgs = frozenset({token.org}) if token.org is not None else None
        if (own and client in self._service_clients) or (
            self._service_role is not None and self._service_role in token.permissions
        ):
            return Caller(name=client or token.subject, kind=CallerKind.SERVICE, orgs=orgs, permissions=ALL_PERMISSIONS)
        if own and client in self._agent_clients:
            return Caller(name=client, kind=CallerKind.AGENT, orgs=orgs, permissions=ALL_PERMISSIONS)
        return Caller(
            name=token.subject, kind=CallerKind.USER, orgs=orgs, permissions=ALL_PERMISSIONS,
            user_id=token.subject, org_id=token.org, user_permissions=token.permissions,
        )


def client_credentials(token: VerifiedToken, client: str) -> bool:
    """Whether a token is its client's own (client credentials) rather than a user's, as each provider
    marks it: the client as subject (oidc-provider, Okta; Auth0's ``<id>@clients`` and ``gty``), Entra ID's
    ``idtyp: app``, Keycloak's service-account user."""
    claims = token.claims
    username = claims.get("preferred_username")
    return (
        token.subject in (client, f"{client}@clients")
        or claims.get("gty") == "client-credentials"
        or claims.get("idtyp") == "app"
        or (isinstance(username, str) and username == f"service-account-{client}")
    )
