"""Role mapping: which conversation roles reach the agent, and as what."""

from __future__ import annotations

import pytest

from conversation_service.history.context import map_role
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

