"""Secrets the page's sign-in keeps: sealed (AES-256-GCM) so that what is stored reveals nothing.

- A session's tokens are sealed with a key derived from its cookie, which the server never stores
  (it stores a hash of it): the session table read by someone else gives neither a usable cookie
  nor the tokens.
- The sign-in under way (state, PKCE verifier, nonce, where to go back to) travels in a cookie sealed
  with a key derived from the client secret, so it needs no storage and cannot be forged or read.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

_NONCE_BYTES = 12


def new_secret() -> str:
    """A cookie value: 256 random bits."""
    return secrets.token_urlsafe(32)


def lookup_id(secret: str) -> str:
    """What the server stores of a cookie: its SHA-256."""
    return hashlib.sha256(secret.encode()).hexdigest()


def derive(secret: str, purpose: str, length: int = 32) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=purpose.encode()).derive(secret.encode())


def tag(secret: str, purpose: str) -> str:
    """A value only the holder of ``secret`` can compute (the CSRF token of a session)."""
    digest = hmac.new(derive(secret, "tag"), purpose.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def seal(key: bytes, value: dict, purpose: str) -> bytes:
    nonce = os.urandom(_NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, orjson.dumps(value), purpose.encode())


def unseal(key: bytes, sealed: bytes, purpose: str) -> dict | None:
    """The sealed value, or None when it was not sealed with this key for this purpose."""
    if len(sealed) <= _NONCE_BYTES:
        return None
    try:
        value = orjson.loads(AESGCM(key).decrypt(sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:], purpose.encode()))
    except (InvalidTag, orjson.JSONDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def seal_text(key: bytes, value: dict, purpose: str) -> str:
    return base64.urlsafe_b64encode(seal(key, value, purpose)).rstrip(b"=").decode()


def unseal_text(key: bytes, text: str, purpose: str) -> dict | None:
    if not text or len(text) > 4096:
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError):
        return None
    return unseal(key, raw, purpose)
