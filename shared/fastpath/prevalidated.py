"""A pydantic model built from values that are already of its fields' types, without validating
them a second time: ``prevalidated(cls)``.

A live agent event's envelope is made of values the run already holds typed (ids, an int seq, the
``EventType``, an aware ``datetime``, the payload dumped from its own model); validating them again
cost about 1.7 us per event, building the instance directly 0.75 us. ``model_construct`` is not the
way: it is pydantic's Python-level path (defaults, aliases and the fields-set computed field by field
per call) and measured slower than validation itself (2.8 us).

Only for plain models: no private attributes, no extra fields, no ``model_post_init``; the builder
takes every field, and the caller vouches for their types (the tests compare with validation).
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)

__all__ = ["prevalidated"]

_new = object.__new__
_set = object.__setattr__


def prevalidated(cls: type[M]) -> Any:
    """A function ``build(*values) -> cls`` for values already of the fields' types, given in the
    fields' order: every field, no defaults filled, nothing checked."""
    if cls.__private_attributes__ or cls.model_config.get("extra") == "allow":
        raise TypeError(f"{cls.__name__} is not a plain model")
    if cls.model_post_init is not BaseModel.model_post_init:
        raise TypeError(f"{cls.__name__} has a model_post_init")
    fields = tuple(cls.model_fields)
    fields_set = frozenset(fields)

    def build(*values: Any) -> M:
        if len(values) != len(fields):
            raise TypeError(f"{cls.__name__} needs every field, in order: {', '.join(fields)}")
        model = _new(cls)
        _set(model, "__dict__", dict(zip(fields, values)))  # in the fields' order, as validation fills it
        _set(model, "__pydantic_fields_set__", fields_set)
        _set(model, "__pydantic_extra__", None)
        _set(model, "__pydantic_private__", None)
        return model

    return build
