"""The realtime parts as the lifespan started them (``app.state.realtime``)."""

from __future__ import annotations

from dataclasses import dataclass

from conversation_service.realtime.hub import Hub
from conversation_service.realtime.publisher import FramePublisher
from conversation_service.realtime.seq import SeqAllocator
from conversation_service.realtime.writer import FrameWriter


@dataclass(frozen=True, slots=True)
class Realtime:
    """A conversation's live stream: seqs, the frame log's group commit, fan-out, and the one way
    to put a frame on it (``publisher``)."""

    hub: Hub
    seq: SeqAllocator
    writer: FrameWriter
    publisher: FramePublisher
