"""Signing in with the organisation's identity provider (``AUTH_OIDC_*``) and the page's sessions
(``AUTH_SESSION_*``). No ``AUTH_OIDC_ISSUER``: the development mode, HS256 tokens signed with
``AUTH_JWT_SECRET``, as ``make run`` uses.
"""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.oidc.settings import OIDCSettings


class ChatOIDCSettings(OIDCSettings):
    """The APIs' access tokens (``issuer``, ``audience``...), and the page's login: the
    ConversationService is a confidential client of the provider (authorization code with PKCE)."""

    model_config = SettingsConfigDict(env_prefix="AUTH_OIDC_", extra="ignore", case_sensitive=False)

    # The page's client at the provider. Without it the APIs take bearer tokens and the page has no login.
    client_id: str | None = Field(default=None, max_length=256)
    client_secret: SecretStr = SecretStr("")
    # Where the provider sends the browser back; unset: this service's /auth/callback as the request
    # reached it (set it behind a proxy: the URL registered at the provider).
    redirect_uri: str | None = None
    scopes: str = Field(default="openid profile email offline_access", max_length=1000)
    # More parameters of the authorization request, URL-encoded: what some providers need to issue
    # an access token for this API (Auth0: audience=..., oidc-provider: resource=...).
    authorize_params: str = Field(default="", max_length=2000)
    # The claim of the ID token the page shows as who is signed in (then preferred_username, then the user id).
    name_claim: str = Field(default="name", min_length=1, max_length=200)

    @field_validator("client_id", "redirect_uri", mode="before")
    @classmethod
    def _unset_when_empty_too(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _login_complete(self) -> ChatOIDCSettings:
        if self.client_id is not None:
            if not self.enabled:
                raise ValueError("AUTH_OIDC_CLIENT_ID needs AUTH_OIDC_ISSUER")
            if not self.client_secret.get_secret_value():
                raise ValueError("AUTH_OIDC_CLIENT_SECRET is required with AUTH_OIDC_CLIENT_ID (a confidential client)")
            if "openid" not in self.scopes.split():
                raise ValueError("AUTH_OIDC_SCOPES must include openid")
        if self.redirect_uri is not None:
            scheme_ok = self.redirect_uri.startswith("https://") or self.redirect_uri.startswith("http://")
            if not scheme_ok:
                raise ValueError("AUTH_OIDC_REDIRECT_URI must be an http(s) URL")
        return self

    @property
    def login_enabled(self) -> bool:
        return self.client_id is not None


class WebSessionSettings(BaseSettings):
    """The page's session: an HttpOnly, SameSite=Lax cookie naming a session stored server-side."""

    model_config = SettingsConfigDict(env_prefix="AUTH_SESSION_", extra="ignore", case_sensitive=False)

    # Secure (and the __Host- name) unless set false: only for a page served over plain http
    # to another machine than this one (browsers treat http://localhost as secure).
    cookie_secure: bool = True
    # A session ends after this long whatever happens; before, whenever the provider refuses to
    # refresh its tokens (the user was signed out or disabled there).
    max_age_s: int = Field(default=12 * 3600, ge=60, le=30 * 24 * 3600)
    # Tokens are refreshed this long before the access token expires.
    refresh_margin_s: float = Field(default=60.0, ge=0, le=3600)
    # How long a sign-in at the provider may take.
    login_timeout_s: int = Field(default=600, ge=30, le=3600)
    cleanup_interval_s: float = Field(default=600.0, gt=0, le=86_400)
    # An open WebSocket of the page checks its session this often: one signed out (on any replica)
    # is closed within this long.
    socket_recheck_s: float = Field(default=60.0, gt=0, le=3600)
