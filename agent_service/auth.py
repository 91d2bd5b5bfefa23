"""``X-API-Key`` authentication: every configured key is valid (rotation), compared in constant time."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends
from fastapi.security import APIKeyHeader

from agent_service.deps import SettingsDep
from agent_service.errors import Unauthorized

_api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False)


def key_is_valid(presented: str, keys: list[str]) -> bool:
    presented_bytes = presented.encode()
    valid = False
    # No early exit: the time taken does not tell which key (or how much of one) matched.
    for key in keys:
        valid |= hmac.compare_digest(presented_bytes, key.encode())
    return valid


async def require_api_key(settings: SettingsDep, presented: Annotated[str | None, Depends(_api_key_header)]) -> None:
    keys = settings.api_keys
    if not presented or not keys or not key_is_valid(presented, keys):
        raise Unauthorized("missing or invalid X-API-Key")


ApiKey = Annotated[None, Depends(require_api_key)]
