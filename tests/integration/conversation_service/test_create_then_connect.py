"""A conversation is committed before ``POST /conversations`` answers 201.

A client that opens the new conversation's WebSocket the moment it has the 201 must be let in:
the ownership check of the WebSocket reads the row, so the request's commit has to precede the
response (a yield dependency's exit code otherwise runs after it is sent).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import orjson

from conversation_service.app import create_app
from conversation_service.conversations.repository import ConversationRepository
from shared.transactions import transaction
from tests.integration.conversation_service.support import (
    auth,
    connect,
    make_settings,
    new_conversation,
    recv_frame,
)
from tests.support.servers import serve_app

CLIENTS = 40
ROUNDS = 3


async def _create_and_connect(client: httpx.AsyncClient, base: str, user: str) -> str:
    conversation = await new_conversation(client, base, user)
    # No wait and no read-back between the 201 and the handshake.
    async with await connect(base, conversation["id"], user) as ws:
        # An answered ping proves the server kept the connection (a refusal closes it with 1008).
        await ws.send(json.dumps({"type": "ping", "data": {"n": user}}))
        pong = await recv_frame(ws)
        assert pong == {"type": "pong", "data": {"n": user}}
    return conversation["id"]


class CommitProbe:
    """Wraps the app: when the body of a 201 to ``POST /conversations`` is about to be sent, reads
    the new row through another database connection. A row the response announces but that
    connection cannot see yet is not committed: a client acting on the 201 could miss it."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.visible: list[bool] = []

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != "/conversations":
            await self.app(scope, receive, send)
            return
        status: list[int] = []

        async def probing_send(message: dict) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            elif message["type"] == "http.response.body" and status == [201]:
                conversation = orjson.loads(message["body"])
                sessionmaker = self.app.state.storage.sessionmaker
                async with transaction(sessionmaker) as session:
                    row = await ConversationRepository(session).get(conversation["id"])
                self.visible.append(row is not None)
            await send(message)

        await self.app(scope, receive, probing_send)


async def test_websocket_opened_right_after_create_is_accepted(database_url: str) -> None:
    limits = httpx.Limits(max_connections=CLIENTS * 2)
    probe = CommitProbe(create_app(make_settings(database_url)))
    async with serve_app(probe) as base, httpx.AsyncClient(limits=limits) as client:
        created: list[str] = []
        for round_ in range(ROUNDS):
            created += await asyncio.gather(
                *(_create_and_connect(client, base, f"user-{round_}-{i}") for i in range(CLIENTS))
            )
        assert len(set(created)) == CLIENTS * ROUNDS
        # Committed before the response went out, every time.
        assert probe.visible == [True] * (CLIENTS * ROUNDS)
        # Every one of them is a real, readable row for its owner.
        listed = (await client.get(f"{base}/conversations", headers=auth("user-0-0"))).json()
        assert [c["id"] for c in listed["items"]] == [created[0]]
