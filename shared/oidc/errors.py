"""The errors of ``shared.oidc``; each service maps them onto its own vocabulary (401 and 503)."""

from __future__ import annotations


class OIDCError(Exception):
    """Base of this package's errors. The message is safe to show: it never holds a token."""


class InvalidToken(OIDCError):
    """The token is not acceptable. ``reason`` names the check (a metric label, never shown)."""

    def __init__(self, message: str, reason: str = "invalid") -> None:
        super().__init__(message)
        self.reason = reason


class ProviderUnavailable(OIDCError):
    """The identity provider did not answer (or answered nonsense) and nothing cached could stand in."""


class TokenRequestRefused(OIDCError):
    """The token endpoint refused a grant (``error``: ``invalid_grant``, ``invalid_client``...)."""

    def __init__(self, error: str) -> None:
        super().__init__(f"the identity provider refused the token request: {error}")
        self.error = error
