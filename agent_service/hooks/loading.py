"""Which hooks a service runs: ``AGENT_SERVICE_HOOKS=module:Class,...`` in that order, then the
classes installed packages declare under the ``taskforce.agent_hooks`` entry point group (when
``AGENT_SERVICE_HOOK_ENTRY_POINTS`` is on).

A hook class is built with ``Class.from_settings(settings)`` when it has that class method (to
read its own settings), else with ``Class()``. A name that does not resolve to a ``Hook`` subclass
stops the start-up with an error naming it: a hook that was asked for and silently missing (an
audit log, a tool block) would be worse than no start.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from agent_service.hooks.base import Hook
from agent_service.settings import AgentServiceSettings

ENTRY_POINT_GROUP = "taskforce.agent_hooks"


class HookConfigError(ValueError):
    pass


def load_hooks(settings: AgentServiceSettings) -> list[Hook]:
    classes = [resolve(spec) for spec in settings.hooks]
    if settings.hook_entry_points:
        for point in entry_points(group=ENTRY_POINT_GROUP):
            classes.append(_checked(point.load(), f"entry point {point.name} ({point.value})"))
    return [build(cls, settings) for cls in classes]


def resolve(spec: str) -> type[Hook]:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise HookConfigError(f"hook {spec!r} is not of the form module:Class")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise HookConfigError(f"hook {spec!r}: cannot import {module_name}: {exc}") from exc
    for part in attr.split("."):
        if not hasattr(target, part):
            raise HookConfigError(f"hook {spec!r}: {module_name} has no {attr}")
        target = getattr(target, part)
    return _checked(target, f"hook {spec!r}")


def _checked(target: Any, what: str) -> type[Hook]:
    if not (isinstance(target, type) and issubclass(target, Hook)):
        raise HookConfigError(f"{what} is not a subclass of agent_service.hooks.base.Hook")
    return target


def build(cls: type[Hook], settings: AgentServiceSettings) -> Hook:
    from_settings = getattr(cls, "from_settings", None)
    return from_settings(settings) if callable(from_settings) else cls()
