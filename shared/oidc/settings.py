"""What a service needs to know about its identity provider; each service reads it under its own
prefix (the ConversationService ``AUTH_OIDC_``, the Agent Service ``AGENT_SERVICE_AUTH_OIDC_``).

No issuer: OpenID Connect is off and the service keeps its other authentication (the chat's
development tokens, the Agent Service's API keys).
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

# Asymmetric algorithms only: with HS256 the key that checks a token also makes one, and the
# provider's "key" for it would be a secret we do not hold. "none" is no signature at all.
SUPPORTED_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"})
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def check_provider_url(value: str, name: str) -> str:
    """An https URL, or http on loopback (a provider on the same machine, as in tests)."""
    parts = urlsplit(value)
    scheme_ok = parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in _LOOPBACK)
    if scheme_ok and parts.netloc and not parts.query and not parts.fragment:
        return value
    raise ValueError(f"{name} must be an https URL (http only on loopback) without query or fragment: {value!r}")


class OIDCSettings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", case_sensitive=False)

    # The issuer exactly as the provider's tokens and discovery document name it.
    issuer: str | None = None
    # The audience (``aud``) this service accepts: its own API's identifier at the provider.
    audience: str | None = None
    algorithms: Annotated[list[str], NoDecode] = ["RS256", "ES256"]
    # Clock skew allowed on exp, nbf and iat.
    leeway_s: float = Field(default=30.0, ge=0, le=300)
    # Keys are used this long before they are refreshed (in the background: a request never waits
    # for a refresh unless its key id is unknown).
    jwks_cache_s: float = Field(default=3600.0, ge=0, le=7 * 24 * 3600)
    # An unknown key id refetches the key set at most this often (a flood of made-up key ids costs
    # the provider one fetch per cooldown); so does a failed fetch.
    jwks_refetch_cooldown_s: float = Field(default=10.0, ge=0, le=3600)
    http_timeout_s: float = Field(default=5.0, gt=0, le=60)
    # The header ``typ`` of the provider's access tokens, where it marks them (RFC 9068: ``at+jwt``; Auth0,
    # oidc-provider, Okta with the RFC 9068 profile). Set, a token without it is refused, so an ID token
    # can never pass for an access token; unset, ID tokens are still refused by their claims.
    access_token_typ: str | None = Field(default=None, min_length=1, max_length=100)
    # Where each provider keeps who the caller is (a dotted path reaches into nested claims, e.g.
    # Keycloak's realm_access.roles; a claim named with dots, like Auth0's namespaced ones, is found as is).
    user_claim: str = Field(default="sub", min_length=1, max_length=200)
    org_claim: str = Field(default="org", min_length=1, max_length=200)
    permissions_claim: str = Field(default="permissions", min_length=1, max_length=200)

    @field_validator("issuer", "audience", "access_token_typ", mode="before")
    @classmethod
    def _unset_when_empty(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("algorithms", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("algorithms")
    @classmethod
    def _asymmetric_only(cls, value: list[str]) -> list[str]:
        refused = [alg for alg in value if alg not in SUPPORTED_ALGORITHMS]
        if refused:
            raise ValueError(f"algorithms not allowed: {', '.join(refused)} "
                             f"(allowed: {', '.join(sorted(SUPPORTED_ALGORITHMS))}; never none or HS*)")
        if not value:
            raise ValueError("at least one algorithm is needed")
        return value

    @model_validator(mode="after")
    def _complete(self) -> OIDCSettings:
        if self.issuer is not None:
            check_provider_url(self.issuer, "the issuer")
            if not self.audience:
                raise ValueError("an issuer needs an audience: the identifier of this service's API at the provider")
        return self

    @property
    def enabled(self) -> bool:
        return self.issuer is not None
