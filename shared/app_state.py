"""What a service's lifespan started, read from ``app.state`` by a request's dependencies.

Every ``Annotated`` dependency alias of both services (the service-wide ones in its ``deps.py``, a
domain's own beside its router or in its package's ``deps.py``) reads its part through ``started``.
(The A2A routes, which take no FastAPI dependencies, read ``app.state.agent`` themselves.)"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import HTTPConnection


def started(*path: str) -> Callable[[HTTPConnection], Awaitable[Any]]:
    """A dependency that answers ``app.state.<path[0]>.<path[1]>...``."""

    # ``async`` although it never waits: FastAPI runs a plain ``def`` dependency in its thread
    # pool, a thread hop per dependency per request for an attribute read.
    async def started_part(conn: HTTPConnection) -> Any:
        value: Any = conn.app.state
        for name in path:
            value = getattr(value, name)
        return value

    return started_part
