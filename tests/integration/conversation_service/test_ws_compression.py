"""permessage-deflate on the chat WebSocket: off unless ``WS_PER_MESSAGE_DEFLATE`` turns it on.

The client below offers the extension (the ``websockets`` client does by default, as browsers do);
what the server answers in the handshake decides whether frames are compressed.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.integration.conversation_service.support import (
    auth,
    collect_until,
    connect,
    make_settings,
    new_conversation,
    recv_frame,
    running,
)


@pytest.mark.parametrize("deflate", [False, True])
async def test_deflate_only_when_turned_on(tmp_path: Path, deflate: bool) -> None:
    overrides = {"ws_per_message_deflate": True} if deflate else {}
    settings = make_settings(f"sqlite+aiosqlite:///{tmp_path}/chat.db", **overrides)
    async with running(settings) as (base, _), httpx.AsyncClient() as client:
        conversation = await new_conversation(client, base, "alice")
        async with await connect(base, conversation["id"], "alice") as ws:
            offered = ws.request.headers.get("Sec-WebSocket-Extensions") or ""
            assert "permessage-deflate" in offered
            accepted = ws.response.headers.get("Sec-WebSocket-Extensions")
            if deflate:
                assert accepted is not None and "permessage-deflate" in accepted
            else:
                assert accepted is None
            # Frames flow either way: a ping is answered, a message comes back as frames.
            await ws.send(json.dumps({"type": "ping", "data": {"n": 1}}))
            assert await recv_frame(ws) == {"type": "pong", "data": {"n": 1}}
            posted = await client.post(
                f"{base}/conversations/{conversation['id']}/messages",
                json={"content": "hello"}, headers=auth("alice"),
            )
            assert posted.status_code == 202, posted.text
            frames = await collect_until(ws, lambda f: f["type"] == "message.completed")
            assert [f["seq"] for f in frames] == sorted(f["seq"] for f in frames)
