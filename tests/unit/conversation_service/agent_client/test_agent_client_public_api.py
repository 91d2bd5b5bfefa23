from __future__ import annotations

import types

import conversation_service.agent_client as package
from conversation_service.agent_client import errors


def test_all_lists_exactly_the_public_names() -> None:
    public = {
        name
        for name, value in vars(package).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert set(package.__all__) == public
    assert len(package.__all__) == len(set(package.__all__))


def test_every_error_class_is_exported() -> None:
    error_classes = {
        name for name, value in vars(errors).items() if isinstance(value, type) and issubclass(value, Exception)
    }
    assert error_classes <= set(package.__all__)
