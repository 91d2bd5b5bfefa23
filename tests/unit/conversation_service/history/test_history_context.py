"""Role mapping and the user context handed to the agent."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from conversation_service.history import map_role, user_context_from
from shared.protocol import Role


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        ("user", Role.USER),
        ("Human", Role.USER),
        ("assistant", Role.ASSISTANT),
        ("agent", Role.ASSISTANT),
        (" bot ", Role.ASSISTANT),
        ("system", Role.SYSTEM),
        ("tool", None),
        ("notice", None),
        ("", None),
    ],
)
def test_role_mapping(role: str, expected: Role | None) -> None:
    assert map_role(role) is expected


def test_user_context_comes_from_the_conversation_and_the_token() -> None:
    context = user_context_from(
        owner_id="u1",
        org_id="acme",
        claims={"sub": "u1", "org_id": "other", "permissions": ["files:read", "web"]},
    )
    assert (context.user_id, context.org_id, context.permissions) == ("u1", "acme", ["files:read", "web"])


def test_org_falls_back_to_the_token_and_scopes_are_read() -> None:
    context = user_context_from(
        owner_id="u1", claims={"org_id": "acme", "scope": "files:read  web files:read"}
    )
    assert (context.org_id, context.permissions) == ("acme", ["files:read", "web"])
    bare = user_context_from(owner_id="u2")
    assert (bare.user_id, bare.org_id, bare.permissions) == ("u2", None, [])


def test_malformed_permissions_are_ignored_and_capped() -> None:
    claims = {"permissions": ["ok", 3, "", "x" * 500, "bad\nline", None, *[f"p{i}" for i in range(300)]]}
    context = user_context_from(owner_id="u1", claims=claims)
    assert context.permissions[0] == "ok"
    assert len(context.permissions) == 100
    assert all(isinstance(p, str) and p.isprintable() and len(p) <= 128 for p in context.permissions)
    assert user_context_from(owner_id="u1", claims={"permissions": "admin"}).permissions == []


def test_a_user_id_is_required() -> None:
    with pytest.raises(ValidationError):
        user_context_from(owner_id="")
