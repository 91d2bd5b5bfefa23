"""Claims where identity providers keep them: flat, namespaced with dots, or nested."""

from __future__ import annotations

import pytest

from shared.oidc.verifier import claim


@pytest.mark.parametrize(("claims", "name", "value"), [
    ({"sub": "alice"}, "sub", "alice"),
    ({"realm_access": {"roles": ["chat", "admin"]}}, "realm_access.roles", ["chat", "admin"]),  # Keycloak
    ({"https://acme.example/org": "acme"}, "https://acme.example/org", "acme"),  # Auth0's namespaced claims
    ({"tid": "0000-1111"}, "tid", "0000-1111"),  # Entra ID's tenant
    ({"realm_access": {}}, "realm_access.roles", None),
    ({"org": "acme"}, "org.name", None),
])
def test_a_claim_by_name_or_path(claims: dict, name: str, value: object) -> None:
    assert claim(claims, name) == value
