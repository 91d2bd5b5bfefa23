"""Pieces of the page's sign-in that need no provider: where it may go back to, and sealing."""

from __future__ import annotations

import pytest

from conversation_service.auth.login import safe_return_to
from conversation_service.auth.sealing import derive, lookup_id, new_secret, seal_text, tag, unseal_text


@pytest.mark.parametrize(("asked", "goes"), [
    ("/", "/"),
    ("/#c=42", "/#c=42"),
    ("/?x=1#c=42", "/?x=1#c=42"),
    (None, "/"),
    ("https://evil.example/", "/"),
    ("//evil.example/", "/"),
    ("/\\evil.example", "/"),
    ("javascript:alert(1)", "/"),
    ("/\nSet-Cookie: x", "/"),
    ("/" + "a" * 3000, "/"),
])
def test_the_page_goes_back_only_to_this_site(asked: str | None, goes: str) -> None:
    assert safe_return_to(asked) == goes


def test_a_sealed_value_opens_only_with_its_key_and_purpose() -> None:
    key = derive("client-secret", "sign-in")
    sealed = seal_text(key, {"state": "s"}, "sign-in")
    assert unseal_text(key, sealed, "sign-in") == {"state": "s"}
    assert unseal_text(derive("another-secret", "sign-in"), sealed, "sign-in") is None
    assert unseal_text(key, sealed, "something else") is None
    tampered = sealed[:-2] + ("A" if sealed[-2] != "A" else "B") + sealed[-1]
    assert unseal_text(key, tampered, "sign-in") is None
    assert unseal_text(key, "not sealed at all", "sign-in") is None


def test_what_the_server_keeps_of_a_cookie_reveals_nothing_of_it() -> None:
    secret = new_secret()
    assert len(secret) >= 43 and secret != new_secret()
    assert lookup_id(secret) != secret and len(lookup_id(secret)) == 64
    assert tag(secret, "csrf") == tag(secret, "csrf") != tag(new_secret(), "csrf")
