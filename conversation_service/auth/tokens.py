"""Issue and verify the chat users' HS256 JWTs.

PyJWT verifies the signature with ``hmac.compare_digest``; only HS256 is accepted, so a token
cannot pick its own algorithm (``none`` or an asymmetric one keyed with our secret).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import jwt

from conversation_service.errors import Unauthorized

ALGORITHM = "HS256"
MAX_TOKEN_CHARS = 8192
MAX_CLAIM_CHARS = 128


@dataclass(frozen=True, slots=True)
class AuthenticatedUser:
    user_id: str
    org_id: str | None = None
    permissions: tuple[str, ...] = field(default_factory=tuple)
    # When the credential stops being valid (epoch seconds): an open WebSocket is closed then
    # unless it is renewed. None: it does not expire.
    expires_at: float | None = None
    # What the page shows as who is signed in.
    name: str | None = None

    def same_identity(self, other: AuthenticatedUser) -> bool:
        return self.user_id == other.user_id and self.org_id == other.org_id


def issue_token(secret: str, user_id: str, org_id: str | None = None, *, ttl_s: int = 3600) -> str:
    now = int(time.time())
    claims: dict[str, object] = {"sub": user_id, "iat": now, "exp": now + ttl_s}
    if org_id:
        claims["org"] = org_id
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


def _claim_str(value: object, name: str, required: bool) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_CLAIM_CHARS or not value.isprintable():
        raise Unauthorized(f"token claim '{name}' is missing or invalid")
    return value


def verify_token(token: str, secret: str, *, leeway_s: float = 0.0) -> AuthenticatedUser:
    if not token or len(token) > MAX_TOKEN_CHARS:
        raise Unauthorized("missing or oversized bearer token")
    try:
        claims = jwt.decode(
            token, secret, algorithms=[ALGORITHM], leeway=leeway_s, options={"require": ["sub", "exp"]}
        )
    except jwt.ExpiredSignatureError:
        raise Unauthorized("token expired") from None
    except jwt.PyJWTError:
        # One message for every failure: which check failed is of no use to an attacker's client.
        raise Unauthorized("invalid token") from None
    user_id = _claim_str(claims.get("sub"), "sub", True)
    org_id = _claim_str(claims.get("org"), "org", False)
    raw_permissions = claims.get("permissions") or []
    if not isinstance(raw_permissions, list) or len(raw_permissions) > 100:
        raise Unauthorized("token claim 'permissions' is invalid")
    permissions = tuple(_claim_str(p, "permissions", True) for p in raw_permissions)
    return AuthenticatedUser(  # type: ignore[arg-type]
        user_id=user_id, org_id=org_id, permissions=permissions, expires_at=float(claims["exp"]) + leeway_s,
    )


def bearer_from_header(value: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None when absent."""
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("Authorization header must be 'Bearer <token>'")
    return token.strip()
