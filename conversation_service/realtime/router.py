"""``/conversations/{id}/ws``: the live stream of a conversation.

Handshake: ``Origin`` (when sent) must be allowed, or be this service's own origin; a token in
``Authorization: Bearer`` or, for browsers, a first frame ``{"type": "auth", "token": ...}`` within
the auth timeout; the conversation must belong to the caller. Every refusal is close code 1008.

Then: subscribe to the hub first, replay persisted frames with ``seq > after_seq``, then live
frames, dropping any ``seq`` already sent, so each frame arrives exactly once.
"""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import urlsplit

import orjson
from fastapi import APIRouter, WebSocket
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.websockets import WebSocketDisconnect, WebSocketState

from conversation_service.auth.tokens import AuthenticatedUser, bearer_from_header, verify_token
from conversation_service.conversations.service import get_owned_conversation
from conversation_service.db.repository import unit_of_work
from conversation_service.errors import (
    WS_MESSAGE_TOO_BIG,
    WS_POLICY_VIOLATION,
    WS_TRY_AGAIN_LATER,
    ServiceError,
    Unauthorized,
)
from conversation_service.messages.schemas import MessageCreate
from conversation_service.messages.service import post_message
from conversation_service.realtime.connection import ClientConnection
from conversation_service.state import ServiceState
from shared.logging import conversation_id_var

log = logging.getLogger(__name__)
router = APIRouter()

SLOW_CONSUMER_REASON = "slow consumer, resume with after_seq"


class _AuthFrame(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: str
    token: str = Field(max_length=8192)


def origin_allowed(origin: str | None, host: str | None, allowed: frozenset[str]) -> bool:
    if origin is None:
        return True  # not a browser: the token is the whole check
    origin = origin.rstrip("/")
    if origin in allowed:
        return True
    # The chat page served by this service itself.
    return host is not None and urlsplit(origin).netloc == host


async def _close(websocket: WebSocket, code: int, reason: str = "") -> None:
    if websocket.client_state != WebSocketState.DISCONNECTED:
        try:
            await asyncio.wait_for(websocket.close(code=code, reason=reason), timeout=2.0)
        except (TimeoutError, RuntimeError, WebSocketDisconnect):
            pass


async def _authenticate_first_frame(websocket: WebSocket, state: ServiceState) -> AuthenticatedUser:
    raw = await asyncio.wait_for(websocket.receive_text(), timeout=state.settings.ws_auth_timeout_s)
    if len(raw) > 16_384:
        raise Unauthorized("auth frame too large")
    try:
        frame = _AuthFrame.model_validate(orjson.loads(raw))
    except (orjson.JSONDecodeError, ValidationError):
        raise Unauthorized("the first frame must be {\"type\": \"auth\", \"token\": ...}") from None
    if frame.type != "auth":
        raise Unauthorized("the first frame must be an auth frame")
    return verify_token(frame.token, state.settings.auth_jwt_secret.get_secret_value(),
                        leeway_s=state.settings.auth_jwt_leeway_s)


@router.websocket("/conversations/{conversation_id}/ws")
async def conversation_ws(websocket: WebSocket, conversation_id: str) -> None:
    state: ServiceState = websocket.app.state.services
    metrics = state.metrics
    conversation_id_var.set(conversation_id)

    if not origin_allowed(websocket.headers.get("origin"), websocket.headers.get("host"), state.settings.allowed_origins):
        metrics.websocket.rejected["origin"].inc()
        await websocket.close(code=WS_POLICY_VIOLATION)  # before accept: the handshake is refused
        return
    raw_after = websocket.query_params.get("after_seq")
    after_seq: int | None = None
    if raw_after is not None:
        if not raw_after.isdigit() or len(raw_after) > 18:
            metrics.websocket.rejected["bad_after_seq"].inc()
            await websocket.close(code=WS_POLICY_VIOLATION)
            return
        after_seq = int(raw_after)

    user: AuthenticatedUser | None = None
    try:
        header_token = bearer_from_header(websocket.headers.get("authorization"))
        if header_token is not None:
            user = verify_token(header_token, state.settings.auth_jwt_secret.get_secret_value(),
                                leeway_s=state.settings.auth_jwt_leeway_s)
    except Unauthorized:
        metrics.websocket.rejected["auth"].inc()
        await websocket.close(code=WS_POLICY_VIOLATION)
        return

    if user is not None:
        # Header auth: everything is checked, and the client subscribed, before the handshake
        # completes, so a frame published right after the client sees "open" is never missed.
        try:
            async with unit_of_work(state.sessionmaker) as session:
                await get_owned_conversation(session, user, conversation_id)
        except ServiceError:
            metrics.websocket.rejected["not_owner"].inc()
            # Accept, then close 1008: the same answer as for first-frame auth and a non-owner.
            await websocket.accept()
            await _close(websocket, WS_POLICY_VIOLATION, "conversation not found")
            return
        await _serve(websocket, state, user, conversation_id, after_seq, accepted=False)
        return

    await websocket.accept()
    try:
        try:
            user = await _authenticate_first_frame(websocket, state)
        except TimeoutError:
            metrics.websocket.rejected["auth_timeout"].inc()
            await _close(websocket, WS_POLICY_VIOLATION, "authentication timeout")
            return
        except Unauthorized:
            metrics.websocket.rejected["auth"].inc()
            await _close(websocket, WS_POLICY_VIOLATION, "authentication failed")
            return
        async with unit_of_work(state.sessionmaker) as session:
            await get_owned_conversation(session, user, conversation_id)
    except ServiceError:
        metrics.websocket.rejected["not_owner"].inc()
        # Same answer for "not yours" and "does not exist".
        await _close(websocket, WS_POLICY_VIOLATION, "conversation not found")
        return
    except WebSocketDisconnect:
        return

    await _serve(websocket, state, user, conversation_id, after_seq, accepted=True)


async def _serve(
    websocket: WebSocket, state: ServiceState, user: AuthenticatedUser, conversation_id: str, after_seq: int | None,
    *, accepted: bool,
) -> None:
    conn = ClientConnection(websocket, state, conversation_id)
    unsubscribe = state.hub.subscribe(conversation_id, conn)  # first: nothing published from now is missed
    state.metrics.websocket.connections.inc()
    watchers: list[asyncio.Task] = []
    try:
        # Read where the stream stands before the client can see the handshake complete: a frame
        # it causes right after "open" must count as live, not as already sent.
        target = await state.publisher.seq.current(conversation_id)
        if not accepted:
            await websocket.accept()
        # The replay up to ``target`` (if asked) goes out first; live frames held until now follow.
        conn.start(after_seq, target)
        receiver = asyncio.create_task(_receive(websocket, state, user, conn), name="ws-receiver")
        overflow = asyncio.create_task(conn.overflowed.wait(), name="ws-overflow")
        send_failed = asyncio.create_task(conn.send_failed.wait(), name="ws-send-failed")
        watchers = [receiver, overflow, send_failed]
        done, _ = await asyncio.wait(watchers, return_when=asyncio.FIRST_COMPLETED)
        if overflow in done:
            state.metrics.websocket.slow_consumers.inc()
            log.info("closing a slow WebSocket client", extra={"last_sent": conn.last_sent})
            unsubscribe()
            receiver.cancel()
            await _close(websocket, WS_TRY_AGAIN_LATER, SLOW_CONSUMER_REASON)
            return
        errors = [receiver.exception()] if receiver in done else []
        if send_failed in done:
            errors.append(conn.error)
        for exc in errors:
            if isinstance(exc, _CloseRequest):
                await _close(websocket, exc.code, exc.reason)
            elif exc is not None and not isinstance(exc, (WebSocketDisconnect, RuntimeError)):
                log.error("WebSocket connection failed", exc_info=exc)
                await _close(websocket, 1011, "internal error")
    except WebSocketDisconnect:
        pass
    finally:
        unsubscribe()
        conn.close()
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        state.metrics.websocket.connections.dec()


class _CloseRequest(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


async def _receive(websocket: WebSocket, state: ServiceState, user: AuthenticatedUser, conn: ClientConnection) -> None:
    cap = state.settings.ws_max_frame_bytes
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", 1000))
        raw = message.get("text")
        if raw is None and message.get("bytes") is not None:
            raw = message["bytes"].decode("utf-8", errors="replace")
        if raw is None:
            continue
        if len(raw) > cap:
            raise _CloseRequest(WS_MESSAGE_TOO_BIG, "frame too large")
        try:
            frame = orjson.loads(raw)
        except orjson.JSONDecodeError:
            conn.send_control({"type": "error", "data": {"error": "invalid_json", "detail": "frames are JSON objects"}})
            continue
        if not isinstance(frame, dict):
            continue
        kind = frame.get("type")
        if kind == "ping":
            conn.send_control({"type": "pong", "data": frame.get("data") if isinstance(frame.get("data"), dict) else {}})
        elif kind == "message.send":
            await _handle_send(state, user, conn, frame)
        # Unknown types are ignored, as clients ignore unknown server frames.


async def _handle_send(state: ServiceState, user: AuthenticatedUser, conn: ClientConnection, frame: dict) -> None:
    payload = frame.get("data") if isinstance(frame.get("data"), dict) else frame
    try:
        body = MessageCreate.model_validate(
            {"content": payload.get("content"), "client_message_id": payload.get("client_message_id")}
        )
        accepted = await post_message(state, user, conn.conversation_id, body.content, body.client_message_id)
    except ValidationError as exc:
        conn.send_control({"type": "error", "data": {"error": "validation_error",
                                                     "detail": [e["msg"] for e in exc.errors()]}})
        return
    except ServiceError as exc:
        conn.send_control({"type": "error", "data": {"error": exc.error, "detail": exc.detail}})
        return
    conn.send_control({"type": "ack", "data": accepted.model_dump(mode="json")})
