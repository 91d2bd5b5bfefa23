"""``/conversations/{id}/ws``: the live stream of a conversation.

Handshake: ``Origin`` (when sent) must be allowed, or be this service's own origin; a token in
``Authorization: Bearer``, the page's session cookie, or a first frame ``{"type": "auth", "token":
...}`` within the auth timeout (``websocket.auth``); the conversation must belong to the caller.
Every refusal is close code 1008 (1013 while the identity provider cannot be asked). A socket does
not outlive its credential: it is renewed in band or closed 1008 when it expires.

Then: subscribe to the hub first, replay persisted frames with ``seq > after_seq``, then live
frames, dropping any ``seq`` already sent, so each frame arrives exactly once (``?batch=1``: frames
that waited for the client arrive together in one ``batch`` message). A client may send
``message.send`` frames: they are posted like ``POST /messages`` and acknowledged on the socket.
"""

from __future__ import annotations

import asyncio
import logging

import orjson
from fastapi import APIRouter, WebSocket
from pydantic import ValidationError
from starlette.websockets import WebSocketDisconnect, WebSocketState

from conversation_service.auth.deps import AuthDep
from conversation_service.auth.guard import origin_allowed
from conversation_service.auth.tokens import AuthenticatedUser
from conversation_service.conversations.service import get_owned_conversation
from conversation_service.db.storage import Storage
from conversation_service.deps import MetricsDep, RealtimeDep, SettingsDep, StorageDep
from conversation_service.errors import (
    WS_MESSAGE_TOO_BIG,
    WS_POLICY_VIOLATION,
    WS_TRY_AGAIN_LATER,
    ServiceError,
)
from conversation_service.messages.deps import MessageServiceDep
from conversation_service.messages.schemas import MessageCreate
from conversation_service.messages.service import MessageService
from conversation_service.metrics import WebSocketMetrics
from conversation_service.realtime.parts import Realtime
from conversation_service.settings import ConversationSettings
from conversation_service.websocket.auth import (
    CloseRequest,
    Refused,
    SocketCredential,
    first_frame_user,
    handshake_user,
    parse_auth_frame,
)
from conversation_service.websocket.connection import ClientConnection
from shared.logging import conversation_id_var
from shared.tracing import NO_TRACING
from shared.tracing.asgi import connection_link
from shared.transactions import transaction

log = logging.getLogger(__name__)
router = APIRouter()

SLOW_CONSUMER_REASON = "slow consumer, resume with after_seq"


async def _close(websocket: WebSocket, code: int, reason: str = "") -> None:
    if websocket.client_state != WebSocketState.DISCONNECTED:
        try:
            await asyncio.wait_for(websocket.close(code=code, reason=reason), timeout=2.0)
        except (TimeoutError, RuntimeError, WebSocketDisconnect):
            pass


def _after_seq(websocket: WebSocket) -> int | None:
    raw = websocket.query_params.get("after_seq")
    if raw is None:
        return None
    if not raw.isdigit() or len(raw) > 18:
        raise Refused("bad_after_seq")
    return int(raw)


def _batches(websocket: WebSocket) -> bool:
    """``?batch=1``: the client takes ``batch`` frames (several frames in one message)."""
    raw = websocket.query_params.get("batch")
    if raw not in (None, "0", "1"):
        raise Refused("bad_batch")
    return raw == "1"


async def _check_owner(storage: Storage, user: AuthenticatedUser, conversation_id: str) -> None:
    try:
        async with transaction(storage.sessionmaker) as session:
            await get_owned_conversation(session, user, conversation_id)
    except ServiceError:
        # Same answer for "not yours" and "does not exist".
        raise Refused("not_owner", "conversation not found") from None


@router.websocket("/conversations/{conversation_id}/ws")
async def conversation_ws(
    websocket: WebSocket, conversation_id: str, settings: SettingsDep, storage: StorageDep, realtime: RealtimeDep,
    metrics: MetricsDep, messages: MessageServiceDep, auth: AuthDep,
) -> None:
    conversation_id_var.set(conversation_id)
    # Refused before the token is known, the handshake itself is refused; after, the socket is
    # accepted and closed with a reason the client can read, whichever way it authenticated.
    opened = False
    try:
        if not origin_allowed(websocket.headers.get("origin"), websocket.headers.get("host"),
                              settings.allowed_origins):
            raise Refused("origin")
        after_seq = _after_seq(websocket)
        batches = _batches(websocket)
        try:
            user, session_secret = await handshake_user(websocket, auth)
        except Refused as refused:
            opened = refused.reason != "auth"  # a session that ended, a provider away: said why
            raise
        opened = True
        if user is None:
            await websocket.accept()
            user = await first_frame_user(websocket, auth, settings.ws_auth_timeout_s)
        # With header or cookie auth, everything is checked, and the client subscribed, before the
        # handshake completes, so a frame published right after the client sees "open" is never missed.
        await _check_owner(storage, user, conversation_id)
    except Refused as refused:
        metrics.websocket.rejected[refused.reason].inc()
        if not opened:
            await websocket.close(code=refused.code)
            return
        if websocket.client_state == WebSocketState.CONNECTING:
            await websocket.accept()
        await _close(websocket, refused.code, refused.text)
        return
    except WebSocketDisconnect:
        return
    conn = ClientConnection(
        websocket, conversation_id, sessionmaker=storage.sessionmaker, writer=realtime.writer,
        metrics=metrics.websocket, queue_size=settings.ws_client_queue_size, replay_wait_s=settings.ws_replay_wait_s,
        batches=batches,
    )
    credential = SocketCredential(user, auth, session_secret)
    await _serve(websocket, conn, realtime, metrics.websocket, _Receiver(settings, messages, credential), after_seq)


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
        expiry = asyncio.create_task(receiver.credential.watch(conn.send_control), name="ws-credential")
        watchers = [receiving, overflow, send_failed, expiry]
        done, _ = await asyncio.wait(watchers, return_when=asyncio.FIRST_COMPLETED)
        if overflow in done:
            metrics.slow_consumers.inc()
            log.info("closing a slow WebSocket client", extra={"last_sent": conn.last_sent})
            unsubscribe()
            receiving.cancel()
            await _close(websocket, WS_TRY_AGAIN_LATER, SLOW_CONSUMER_REASON)
            return
        errors = [task.exception() for task in (receiving, expiry) if task in done]
        if send_failed in done:
            errors.append(conn.error)
        for exc in errors:
            if isinstance(exc, CloseRequest):
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


class _Receiver:
    """What a client sends: pings, chat messages (``message.send``) posted for its user, and new
    tokens (``auth``) that renew the socket's credential."""

    def __init__(self, settings: ConversationSettings, messages: MessageService, credential: SocketCredential) -> None:
        self._cap = settings.ws_max_frame_bytes
        self._messages = messages
        self.credential = credential

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
                raise CloseRequest(WS_MESSAGE_TOO_BIG, "frame too large")
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
                await self._send(websocket, conn, frame)
            elif kind == "auth":
                try:
                    token = parse_auth_frame(raw)
                except ServiceError:
                    raise CloseRequest(WS_POLICY_VIOLATION, "authentication failed") from None
                conn.send_control(await self.credential.renew(token))
            # Unknown types are ignored, as clients ignore unknown server frames.

    async def _send(self, websocket: WebSocket, conn: ClientConnection, frame: dict) -> None:
        """A ``message.send`` frame: a trace of its own (``traceparent`` may come in the frame, as a
        browser cannot set a WebSocket's headers), linked to the connection's handshake."""
        payload = frame.get("data") if isinstance(frame.get("data"), dict) else frame
        traceparent = payload.get("traceparent") or frame.get("traceparent")
        tracing = getattr(websocket.app.state, "tracing", NO_TRACING)
        with tracing.inbound_message("WS message.send", traceparent=traceparent,
                                     linked=connection_link(websocket.scope) if tracing.enabled else (),
                                     attributes={"taskforce.conversation.id": conn.conversation_id}):
            await self._post(conn, payload)

    async def _post(self, conn: ClientConnection, payload: dict) -> None:
        try:
            body = MessageCreate.model_validate(
                {"content": payload.get("content"), "client_message_id": payload.get("client_message_id")}
            )
            accepted = await self._messages.post(
                self.credential.user, conn.conversation_id, body.content, body.client_message_id)
        except ValidationError as exc:
            conn.send_control({"type": "error", "data": {"error": "validation_error",
                                                         "detail": [e["msg"] for e in exc.errors()]}})
            return
        except ServiceError as exc:
            conn.send_control({"type": "error", "data": {"error": exc.error, "detail": exc.detail}})
            return
        conn.send_control({"type": "ack", "data": accepted.model_dump(mode="json")})
