"""uvicorn's WebSocket protocol (``websockets-sansio``), with the two closes a client must be able
to read: the slow consumer's 1013 and the restart's 1012.

uvicorn's ``send`` waits until the socket's write buffer has drained below its high-water mark
before it writes anything, the close frame included. A client that stopped reading never drains
it, so the close of a slow consumer was never written: the app gave up after its bounded wait,
the connection was torn down, and the client saw 1006 with no reason. Here the close frame goes
into the buffer at once, behind the frames already there: a client that reads again gets them,
then 1013. One that still reads nothing ``CLOSE_TIMEOUT_S`` later is reset (it sees 1006), so a
dead client does not hold a socket and its buffer for ever.

On shutdown uvicorn closes every WebSocket with 1012 (Service Restart) and no reason; here the
close says what to do: reconnect and resume with ``after_seq``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

if TYPE_CHECKING:
    from conversation_service.settings import ConversationSettings

WS_SERVICE_RESTART = 1012
RESTART_REASON = "service restarting, reconnect with after_seq"
# How long a closed client has to read what was sent and answer the close before it is reset.
CLOSE_TIMEOUT_S = 10.0


def server_options(settings: ConversationSettings) -> dict[str, Any]:
    """uvicorn ``Config`` options of the chat WebSocket, the same for the service and its tests."""
    return {"ws": ClosingWebSocketProtocol, "ws_per_message_deflate": settings.ws_per_message_deflate}


class ClosingWebSocketProtocol(WebSocketsSansIOProtocol):
    async def send(self, message) -> None:  # type: ignore[override]
        if message["type"] == "websocket.close" and self._may_write_close():
            self._write_close(message.get("code", 1000), message.get("reason") or "")
            self.close_timer = self.loop.call_later(CLOSE_TIMEOUT_S, self._give_up)
            return
        await super().send(message)

    def shutdown(self) -> None:
        if self._may_write_close():
            self.stop_keepalive()
            self._write_close(WS_SERVICE_RESTART, RESTART_REASON)
            self.transport.close()  # once what is buffered has been sent
            return
        super().shutdown()

    def _may_write_close(self) -> bool:
        """An open WebSocket (handshake done, not closed by either side): the close is ours to send."""
        return (
            self.handshake_complete and self.initial_response is None and not self.close_sent
            and not self.disconnected and not self.transport.is_closing()
        )

    def _write_close(self, code: int, reason: str) -> None:
        # As uvicorn's close, without waiting for the buffer to drain first.
        self.queue.put_nowait({"type": "websocket.disconnect", "code": code, "reason": reason})
        self.conn.send_close(code, reason)
        self.transport.write(b"".join(self.conn.data_to_send()))
        self.close_sent = True
        if self.read_paused:  # the client's answer to the close must be read
            self.read_paused = False
            self.transport.resume_reading()

    def _give_up(self) -> None:
        self.close_timer = None
        if self.transport.get_write_buffer_size():
            self.transport.abort()  # still not reading: what is buffered will never be read
        else:
            self.transport.close()
