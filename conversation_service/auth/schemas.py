"""What the page reads about its sign-in."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class SessionUser(BaseModel):
    id: str
    org: str | None = None
    name: str


class SessionInfo(BaseModel):
    """``mode``: ``development`` (bearer tokens signed with the development secret, pasted into the
    page) or ``oidc`` (the identity provider's tokens; ``login``: the page signs in there)."""

    mode: Literal["development", "oidc"]
    login: bool = False
    signed_in: bool = False
    user: SessionUser | None = None
    # Sent back as X-CSRF-Token on every request of the page that changes something.
    csrf_token: str | None = None
    expires_at: float | None = Field(default=None, description="when the session's access token expires (epoch s)")


class SignedOut(BaseModel):
    # Where the page goes next: the provider's logout when it has one, else this site.
    redirect: str
