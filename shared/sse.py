"""Server-Sent Events encoding and decoding, per the WHATWG event-stream format.

The encoder writes one event as ``id:``/``event:``/``data:`` lines; the decoder is incremental
(feed it any slicing of the byte stream) and follows the spec's rules that matter to us: ``data``
lines of one event join with ``\\n``, comments (``:``) are reported separately as heartbeats, and an
event cut off before its blank line is discarded rather than delivered half-read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from shared.protocol import EventEnvelope

SSE_MEDIA_TYPE = "text/event-stream"


@dataclass(slots=True)
class ServerSentEvent:
    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None

    def json(self) -> object:
        return orjson.loads(self.data)


def _field_lines(name: str, value: str) -> bytes:
    # A value containing newlines becomes several lines of the same field; the decoder rejoins them.
    return b"".join(f"{name}: {line}\n".encode() for line in value.split("\n"))


def encode(data: str, *, event: str | None = None, id: str | int | None = None, retry_ms: int | None = None) -> bytes:
    out = bytearray()
    if retry_ms is not None:
        out += f"retry: {int(retry_ms)}\n".encode()
    if id is not None:
        out += f"id: {id}\n".encode()
    if event is not None:
        out += f"event: {event}\n".encode()
    out += _field_lines("data", data)
    out += b"\n"
    return bytes(out)


# What ``model_dump(mode="json")`` would give, byte for byte: UTC as ``Z``, keys as strings.
_ENVELOPE_JSON = orjson.OPT_UTC_Z | orjson.OPT_NON_STR_KEYS


def encode_envelope(envelope: EventEnvelope, *, retry_ms: int | None = None) -> bytes:
    """One agent event as SSE: ``id`` = seq, ``event`` = type, ``data`` = the JSON envelope.

    Encoded straight from the fields with orjson (once per event, on the streaming path): the
    pydantic dump followed by the generic ``encode`` cost three times as much for the same bytes.
    JSON never holds a raw line break, so the envelope is always one ``data:`` line."""
    data = orjson.dumps(
        {
            "session_id": envelope.session_id, "run_id": envelope.run_id, "seq": envelope.seq,
            "type": envelope.type.value, "ts": envelope.ts, "data": envelope.data,
        },
        option=_ENVELOPE_JSON,
    )
    head = b"" if retry_ms is None else b"retry: %d\n" % int(retry_ms)
    return b"%sid: %d\nevent: %s\ndata: %s\n\n" % (head, envelope.seq, envelope.type.value.encode(), data)


def encode_comment(text: str = "") -> bytes:
    """A comment line; clients ignore it, proxies see traffic (the heartbeat)."""
    return b"".join(f": {line}\n".encode() for line in (text or "").split("\n")) + b"\n"


def encode_retry(retry_ms: int) -> bytes:
    return f"retry: {int(retry_ms)}\n\n".encode()


@dataclass
class SSEDecoder:
    """Incremental decoder: ``feed()`` bytes or text, get complete events back."""

    last_event_id: str | None = None
    comments: int = 0
    _buffer: str = ""
    _pending_bytes: bytes = b""
    _data: list[str] = field(default_factory=list)
    _event: str | None = None
    _id: str | None = None
    _retry: int | None = None
    _has_fields: bool = False

    def feed(self, chunk: bytes | str) -> list[ServerSentEvent]:
        if isinstance(chunk, bytes):
            # Keep an incomplete UTF-8 sequence for the next chunk instead of failing on it.
            raw = self._pending_bytes + chunk
            try:
                text = raw.decode("utf-8")
                self._pending_bytes = b""
            except UnicodeDecodeError as exc:
                if exc.start < len(raw) - 3:
                    raise
                text = raw[: exc.start].decode("utf-8")
                self._pending_bytes = raw[exc.start :]
        else:
            text = chunk
        buffer = self._buffer + text if self._buffer else text
        events: list[ServerSentEvent] = []
        # Walk the buffer with an offset and str.find (C speed) instead of re-slicing the rest of
        # the buffer after every line: a burst of hundreds of events in one read stays linear.
        pos, end = 0, len(buffer)
        while pos < end:
            newline = buffer.find("\n", pos)
            carriage = buffer.find("\r", pos, newline if newline >= 0 else end)
            if carriage >= 0:
                if carriage + 1 == end:
                    break  # may be the first half of \r\n: wait for the next chunk
                line = buffer[pos:carriage]
                pos = carriage + 2 if buffer[carriage + 1] == "\n" else carriage + 1
            elif newline >= 0:
                line = buffer[pos:newline]
                pos = newline + 1
            else:
                break
            event = self._process_line(line)
            if event is not None:
                events.append(event)
        self._buffer = buffer[pos:]
        return events

    def _process_line(self, line: str) -> ServerSentEvent | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            self.comments += 1
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
            self._has_fields = True
        elif name == "event":
            self._event = value
            self._has_fields = True
        elif name == "id":
            if "\0" not in value:
                self._id = value
                self._has_fields = True
        elif name == "retry" and value.isdigit():
            self._retry = int(value)
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        if self._id is not None:
            self.last_event_id = self._id
        event = None
        if self._data:  # an event without data dispatches nothing (the spec's rule)
            event = ServerSentEvent(self._event or "message", "\n".join(self._data), self._id, self._retry)
        self._data = []
        self._event = None
        self._id = None
        self._retry = None
        self._has_fields = False
        return event

    @property
    def has_partial_event(self) -> bool:
        """True when the stream ended inside an event; that event is dropped, never delivered."""
        return self._has_fields or bool(self._buffer)


def decode_envelope(event: ServerSentEvent) -> EventEnvelope:
    """Parse and validate an agent event; raises ``ValueError`` subclasses on malformed input."""
    envelope = EventEnvelope.model_validate_json(event.data)
    if event.id is not None and event.id != str(envelope.seq):
        raise ValueError(f"SSE id {event.id!r} does not match envelope seq {envelope.seq}")
    envelope.payload()  # validates the payload against its type
    return envelope
