"""``/conversations/{id}/ws``: the live stream of a conversation.

Handshake: ``Origin`` (when sent) must be allowed, or be this service's own origin; a token in
``Authorization: Bearer`` or, for browsers, a first frame ``{"type": "auth", "token": ...}`` within
the auth timeout; the conversation must belong to the caller. Every refusal is close code 1008.

Then: subscribe to the hub first, replay persisted frames with ``seq > after_seq``, then live
frames, dropping any ``seq`` already sent, so each frame arrives exactly once (``?batch=1``: frames
that waited for the client arrive together in one ``batch`` message). A client may send
``message.send`` frames: they are posted like ``POST /messages`` and acknowledged on the socket.
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
from conversation_service.deps import MessageServiceDep, MetricsDep, RealtimeDep, SettingsDep, StorageDep
from conversation_service.errors import (
    WS_MESSAGE_TOO_BIG,
    WS_POLICY_VIOLATION,
    WS_TRY_AGAIN_LATER,
    ServiceError,
    Unauthorized,
)
from conversation_service.lifespan import Realtime, Storage
from conversation_service.messages.schemas import MessageCreate
from conversation_service.messages.service import MessageService
from conversation_service.metrics import WebSocketMetrics
from conversation_service.settings import ConversationSettings
from conversation_service.websocket.connection import ClientConnection
from shared.logging import conversation_id_var

log = logging.getLogger(__name__)
router = APIRouter()

SLOW_CONSUMER_REASON = "slow consumer, resume with after_seq"


class _AuthFrame(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: str
    token: str = Field(max_length=8192)


class _Refused(Exception):
    """The handshake failed: the reason is counted and, once accepted, the client is told."""

    def __init__(self, reason: str, text: str = "") -> None:
        super().__init__(text)
        self.reason = reason
        self.text = text


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


def _verify(settings: ConversationSettings, token: str) -> AuthenticatedUser:
    return verify_token(token, settings.auth_jwt_secret.get_secret_value(), leeway_s=settings.auth_jwt_leeway_s)


def _after_seq(websocket: WebSocket) -> int | None:
    raw = websocket.query_params.get("after_seq")
    if raw is None:
        return None
    if not raw.isdigit() or len(raw) > 18:
        raise _Refused("bad_after_seq")
    return int(raw)


def _batches(websocket: WebSocket) -> bool:
    """``?batch=1``: the client takes ``batch`` frames (several frames in one message)."""
    raw = websocket.query_params.get("batch")
    if raw not in (None, "0", "1"):
        raise _Refused("bad_batch")
    return raw == "1"


async def _authenticate_first_frame(websocket: WebSocket, settings: ConversationSettings) -> AuthenticatedUser:
    try:
        raw = await asyncio.wait_for(websocket.receive_text(), timeout=settings.ws_auth_timeout_s)
    except TimeoutError:
        raise _Refused("auth_timeout", "authentication timeout") from None
    try:
        if len(raw) > 16_384:
            raise Unauthorized("auth frame too large")
        try:
            frame = _AuthFrame.model_validate(orjson.loads(raw))
        except (orjson.JSONDecodeError, ValidationError):
            raise Unauthorized("the first frame must be {\"type\": \"auth\", \"token\": ...}") from None
        if frame.type != "auth":
            raise Unauthorized("the first frame must be an auth frame")
        return _verify(settings, frame.token)
    except Unauthorized:
        raise _Refused("auth", "authentication failed") from None


async def _check_owner(storage: Storage, user: AuthenticatedUser, conversation_id: str) -> None:
    try:
        async with unit_of_work(storage.sessionmaker) as session:
            await get_owned_conversation(session, user, conversation_id)
    except ServiceError:
        # Same answer for "not yours" and "does not exist".
        raise _Refused("not_owner", "conversation not found") from None


@router.websocket("/conversations/{conversation_id}/ws")
async def conversation_ws(
    websocket: WebSocket, conversation_id: str, settings: SettingsDep, storage: StorageDep, realtime: RealtimeDep,
    metrics: MetricsDep, messages: MessageServiceDep,
) -> None:
    conversation_id_var.set(conversation_id)
    # Refused before the token is known, the handshake itself is refused; after, the socket is
    # accepted and closed, the same answer whichever way the client authenticated.
    opened = False
    try:
        if not origin_allowed(websocket.headers.get("origin"), websocket.headers.get("host"),
                              settings.allowed_origins):
            raise _Refused("origin")
        after_seq = _after_seq(websocket)
        batches = _batches(websocket)
        try:
            header_token = bearer_from_header(websocket.headers.get("authorization"))
            user = _verify(settings, header_token) if header_token is not None else None
        except Unauthorized:
            raise _Refused("auth") from None
        opened = True
        if user is None:
            await websocket.accept()
            user = await _authenticate_first_frame(websocket, settings)
        # With header auth, everything is checked, and the client subscribed, before the handshake
        # completes, so a frame published right after the client sees "open" is never missed.
        await _check_owner(storage, user, conversation_id)
    except _Refused as refused:
        metrics.websocket.rejected[refused.reason].inc()
        if not opened:
            await websocket.close(code=WS_POLICY_VIOLATION)
            return
        if websocket.client_state == WebSocketState.CONNECTING:
            await websocket.accept()
        await _close(websocket, WS_POLICY_VIOLATION, refused.text)
        return
    except WebSocketDisconnect:
        return
    conn = ClientConnection(
        websocket, conversation_id, sessionmaker=storage.sessionmaker, writer=realtime.writer,
        metrics=metrics.websocket, queue_size=settings.ws_client_queue_size, replay_wait_s=settings.ws_replay_wait_s,
        batches=batches,
    )
    await _serve(websocket, conn, realtime, metrics.websocket, _Receiver(settings, messages, user), after_seq)


async def _serve(
    websocket: WebSocket, conn: ClientConnection, realtime: Realtime, metrics: WebSocketMetrics,
    receiver: _Receiver, after_seq: int | None,
) -> None:
    conversation_id = conn.conversation_id
    unsubscribe = realtime.hub.subscribe(conversation_id, conn)  # first: nothing published from now is missed
    metrics.connections.inc()
    watchers: list[asyncio.Task] = []
    try:
        # Read where the stream stands before the client can see the handshake complete: a frame
        # it causes right after "open" must count as live, not as already sent.
        target = await realtime.seq.current(conversation_id)
        if websocket.client_state == WebSocketState.CONNECTING:
            await websocket.accept()
        # The replay up to ``target`` (if asked) goes out first; live frames held until now follow.
        conn.start(after_seq, target)
        receiving = asyncio.create_task(receiver.run(websocket, conn), name="ws-receiver")
        overflow = asyncio.create_task(conn.overflowed.wait(), name="ws-overflow")
        send_failed = asyncio.create_task(conn.send_failed.wait(), name="ws-send-failed")
        watchers = [receiving, overflow, send_failed]
        done, _ = await asyncio.wait(watchers, return_when=asyncio.FIRST_COMPLETED)
        if overflow in done:
            metrics.slow_consumers.inc()
            log.info("closing a slow WebSocket client", extra={"last_sent": conn.last_sent})
            unsubscribe()
            receiving.cancel()
            await _close(websocket, WS_TRY_AGAIN_LATER, SLOW_CONSUMER_REASON)
            return
        errors = [receiving.exception()] if receiving in done else []
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
        metrics.connections.dec()


class _CloseRequest(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class _Receiver:
    """What a client sends: pings, and chat messages (``message.send``) posted for its user."""

    def __init__(self, settings: ConversationSettings, messages: MessageService, user: AuthenticatedUser) -> None:
        self._cap = settings.ws_max_frame_bytes
        self._messages = messages
        self._user = user

    async def run(self, websocket: WebSocket, conn: ClientConnection) -> None:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                raise WebSocketDisconnect(message.get("code", 1000))
            raw = message.get("text")
            if raw is None and message.get("bytes") is not None:
                raw = message["bytes"].decode("utf-8", errors="replace")
            if raw is None:
                continue
            if len(raw) > self._cap:
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
                data = frame.get("data")
                conn.send_control({"type": "pong", "data": data if isinstance(data, dict) else {}})
            elif kind == "message.send":
                await self._send(conn, frame)
            # Unknown types are ignored, as clients ignore unknown server frames.

    async def _send(self, conn: ClientConnection, frame: dict) -> None:
        payload = frame.get("data") if isinstance(frame.get("data"), dict) else frame
        try:
            body = MessageCreate.model_validate(
                {"content": payload.get("content"), "client_message_id": payload.get("client_message_id")}
            )
            accepted = await self._messages.post(self._user, conn.conversation_id, body.content, body.client_message_id)
        except ValidationError as exc:
            conn.send_control({"type": "error", "data": {"error": "validation_error",
                                                         "detail": [e["msg"] for e in exc.errors()]}})
            return
        except ServiceError as exc:
            conn.send_control({"type": "error", "data": {"error": exc.error, "detail": exc.detail}})
            return
        conn.send_control({"type": "ack", "data": accepted.model_dump(mode="json")})
