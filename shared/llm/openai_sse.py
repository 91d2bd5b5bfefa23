"""The ``data:`` payloads of a model's server-sent event stream, read straight from its bytes.

A chat-completions stream is one small event per token. Decoding it to text, splitting the text
into lines and building an event object per line (``httpx_sse`` over ``aiter_text``) cost more CPU
per token than everything else the Agent Service does with that token; here each read is cut into
events with ``bytes.split`` and only the ``data`` field is kept, as bytes (``orjson`` parses bytes).

The WHATWG rules that matter are kept: LF, CRLF or CR end a line, a blank line ends an event, the
``data`` lines of one event join with ``\\n``, one space after the colon is dropped, comments and
other fields are ignored, and an event without data dispatches nothing. An event cut off by the end
of the stream is dropped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

__all__ = ["check_event_stream", "iter_data"]


def check_event_stream(response: httpx.Response) -> str | None:
    """What is wrong with ``response`` as an event stream (its content type), or None."""
    content_type = response.headers.get("content-type", "").partition(";")[0]
    if "text/event-stream" not in content_type:
        return f"expected Content-Type text/event-stream, got {content_type!r}"
    return None


class DataDecoder:
    """Incremental: ``feed`` any slicing of the stream, get the complete events' data back."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        buffer = self._buffer + chunk if self._buffer else chunk
        if b"\r" in buffer:
            # Rare (servers send LF): a CR at the very end may be half of a CRLF, so it waits.
            held = buffer.endswith(b"\r")
            if held:
                buffer = buffer[:-1]
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if held:
                buffer += b"\r"
        lines = buffer.split(b"\n")
        self._buffer = lines.pop()  # the unfinished last line (empty after a line break)
        out: list[bytes] = []
        for line in lines:
            if not line:
                if self._data:
                    out.append(self._data[0] if len(self._data) == 1 else b"\n".join(self._data))
                    self._data = []
            elif line.startswith(b"data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(b" ") else value)
        return out

    def end(self) -> list[bytes]:
        """The stream ended: a CR held back as a possible half of CRLF was a whole line break."""
        return self.feed(b"\n") if self._buffer.endswith(b"\r") else []


async def iter_data(response: httpx.Response) -> AsyncIterator[bytes]:
    """Each event's ``data`` of ``response``'s body, in order."""
    decoder = DataDecoder()
    async for chunk in response.aiter_bytes():
        for data in decoder.feed(chunk):
            yield data
    for data in decoder.end():
        yield data
