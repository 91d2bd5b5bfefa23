"""``POST /operator/dead-letters/{id}/replay``: what ``python -m conversation_service dead-letters
replay`` calls. For operators, not users: it needs ``X-Operator-Key`` (``OPERATOR_API_KEY``; unset,
the route answers 404 as if it did not exist), and is left out of the public OpenAPI document."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path

from conversation_service.dead_letters.replay import DeadLetterReplayer
from conversation_service.deps import SettingsDep
from conversation_service.errors import NotFound, Unauthorized
from shared.app_state import started

router = APIRouter(prefix="/operator", include_in_schema=False)
DeadLetterReplayerDep = Annotated[DeadLetterReplayer, Depends(started("dead_letters"))]

OPERATOR_KEY_HEADER = "X-Operator-Key"


def check_operator_key(
    settings: SettingsDep, key: Annotated[str | None, Header(alias=OPERATOR_KEY_HEADER, max_length=512)] = None
) -> None:
    expected = settings.operator_api_key.get_secret_value()
    if not expected:
        raise NotFound("not found")
    # Constant time: how much of a guess matched must not show in the answer's timing.
    if key is None or not hmac.compare_digest(key.encode(), expected.encode()):
        raise Unauthorized("missing or invalid operator key")


@router.post("/dead-letters/{letter_id}/replay", dependencies=[Depends(check_operator_key)])
async def replay_dead_letter(
    letter_id: Annotated[str, Path(min_length=1, max_length=64)],
    replayer: DeadLetterReplayerDep,
) -> dict[str, str]:
    """Replay the letter's message to the agent; answers once the replayed turn has ended."""
    return (await replayer.replay(letter_id)).as_dict()
