"""The answer text a client shows for a run, from the events it read: ``ANSWER_CHUNK`` appends, and
``RUN_RESUMED`` (the run continued after its process died) cuts the run's text back to what stands
(``answer_chars``), as the wire contract tells clients to (``shared.protocol.RunResumedData``)."""

from __future__ import annotations

from collections.abc import Iterable

from shared.protocol import EventEnvelope, EventType


def run_text(events: Iterable[EventEnvelope], run_id: str) -> str:
    text = ""
    for event in events:
        if event.run_id != run_id:
            continue
        if event.type is EventType.ANSWER_CHUNK:
            text += event.data["text"]
        elif event.type is EventType.RUN_RESUMED:
            text = text[: event.data["answer_chars"]]
    return text


def run_text_by_seq(events: Iterable[EventEnvelope], run_id: str) -> str:
    """The same, the other way the contract allows: drop the run's chunks after ``checkpoint_seq``."""
    chunks: list[tuple[int, str]] = []
    for event in events:
        if event.run_id != run_id:
            continue
        if event.type is EventType.ANSWER_CHUNK:
            chunks.append((event.seq, event.data["text"]))
        elif event.type is EventType.RUN_RESUMED:
            chunks = [(seq, text) for seq, text in chunks if seq <= event.data["checkpoint_seq"]]
    return "".join(text for _, text in chunks)
