"""The remembered end states of sessions this process completed."""

from __future__ import annotations

import gc
import tracemalloc

from agent_service.events.snapshots import (
    DEFAULT_MAX_BYTES,
    MESSAGE_OVERHEAD_BYTES,
    TOOL_CALL_OVERHEAD_BYTES,
    SessionSnapshot,
    SessionSnapshots,
    transcript_bytes,
)
from agent_service.models import AgentSession
from shared.protocol import SessionStatus


def _snapshot(run_id: str = "r1", last_seq: int = 7) -> SessionSnapshot:
    return SessionSnapshot(run_id=run_id, last_seq=last_seq, transcript=[{"role": "user", "content": "hi"}])


def test_take_returns_once_and_the_oldest_go_first() -> None:
    snapshots = SessionSnapshots(capacity=2)
    snapshots.remember("a", _snapshot())
    snapshots.remember("b", _snapshot())
    snapshots.remember("a", _snapshot("r2"))  # refreshed: now the newest
    snapshots.remember("c", _snapshot())
    assert len(snapshots) == 2
    assert snapshots.take("b") is None
    assert snapshots.take("a").run_id == "r2"
    assert snapshots.take("a") is None


def _sized(run_id: str, text_bytes: int) -> SessionSnapshot:
    """A snapshot whose estimated size is ``MESSAGE_OVERHEAD_BYTES + text_bytes``."""
    return SessionSnapshot(run_id=run_id, last_seq=1, transcript=[{"role": "assistant", "content": "x" * text_bytes}])


def test_the_size_is_the_text_plus_a_cost_per_message_and_tool_call() -> None:
    transcript = [
        {"role": "user", "content": "what is 2+2"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "name": "calculator", "arguments": {"expression": "2+2"}},
        ]},
        {"role": "tool", "content": "4", "tool_call_id": "c1", "name": "calculator"},
        {"role": "assistant", "content": None},
    ]
    arguments = len('{"expression":"2+2"}')
    assert transcript_bytes(transcript) == 4 * MESSAGE_OVERHEAD_BYTES + len("what is 2+2") + len("4") + (
        TOOL_CALL_OVERHEAD_BYTES + arguments
    )
    assert SessionSnapshot(run_id="r", last_seq=1, transcript=transcript).size == transcript_bytes(transcript)


def test_the_byte_bound_evicts_the_least_recently_completed() -> None:
    one = MESSAGE_OVERHEAD_BYTES + 1000
    snapshots = SessionSnapshots(capacity=100, max_bytes=3 * one)
    for session in "abc":
        snapshots.remember(session, _sized(session, 1000))
    assert snapshots.bytes == 3 * one
    snapshots.remember("a", _sized("a2", 1000))  # completed again: now the newest
    snapshots.remember("d", _sized("d", 1000))
    assert len(snapshots) == 3
    assert snapshots.bytes == 3 * one
    assert snapshots.take("b") is None  # the least recently completed went first
    assert [snapshots.take(s).run_id for s in "acd"] == ["a2", "c", "d"]
    assert snapshots.bytes == 0


def test_a_larger_snapshot_pushes_out_as_many_as_it_needs() -> None:
    one = MESSAGE_OVERHEAD_BYTES + 1000
    snapshots = SessionSnapshots(capacity=100, max_bytes=4 * one)
    for session in "abcd":
        snapshots.remember(session, _sized(session, 1000))
    snapshots.remember("big", _sized("big", 2 * one + 500))
    assert [s for s in "abcd" if snapshots.take(s) is not None] == ["d"]
    assert snapshots.take("big") is not None
    assert snapshots.bytes == 0


def test_a_transcript_over_the_whole_bound_is_not_kept_and_evicts_nothing() -> None:
    snapshots = SessionSnapshots(capacity=100, max_bytes=10_000)
    snapshots.remember("a", _sized("a", 100))
    snapshots.remember("a", _sized("a-huge", 20_000))  # its older snapshot is stale now: gone too
    snapshots.remember("b", _sized("b-huge", 20_000))
    snapshots.remember("c", _sized("c", 100))
    assert len(snapshots) == 1
    assert snapshots.take("a") is None and snapshots.take("b") is None
    assert snapshots.take("c").run_id == "c"


def test_a_zero_bound_keeps_nothing() -> None:
    snapshots = SessionSnapshots(max_bytes=0)
    snapshots.remember("a", _snapshot())
    assert len(snapshots) == 0 and snapshots.bytes == 0


def test_many_completed_sessions_stay_within_the_bound() -> None:
    snapshots = SessionSnapshots(capacity=256, max_bytes=64 * 1024)
    for i in range(5000):
        snapshots.remember(f"s{i}", _sized(f"r{i}", 2000))
        assert snapshots.bytes <= 64 * 1024
    assert len(snapshots) == 64 * 1024 // (MESSAGE_OVERHEAD_BYTES + 2000)
    assert snapshots.bytes == sum(snapshots.take(f"s{i}").size for i in range(5000 - len(snapshots), 5000))


def test_a_snapshot_matches_only_the_session_as_its_run_left_it() -> None:
    snapshot = _snapshot()
    left = AgentSession(status=SessionStatus.COMPLETED.value, current_run_id="r1", last_seq=7)
    assert snapshot.matches(left)
    assert not snapshot.matches(AgentSession(status=SessionStatus.ACTIVE.value, current_run_id="r1", last_seq=7))
    assert not snapshot.matches(AgentSession(status=SessionStatus.COMPLETED.value, current_run_id="r2", last_seq=7))
    assert not snapshot.matches(AgentSession(status=SessionStatus.COMPLETED.value, current_run_id="r1", last_seq=9))


def _traced_after_gc() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def test_the_byte_bound_holds_in_memory_under_a_long_load() -> None:
    """The Locust scenario's shape: many sessions, each a conversation of up to 40 turns (a short
    question, an answer of about 1 700 characters), one snapshot per completed turn. The cache
    fills over the first tens of minutes (the Agent Service's slow RSS rise, docs/benchmarks-history.md)
    and then holds what its default bound (4 MiB, estimated) says, within 25 %, however many more
    sessions come."""
    snapshots = SessionSnapshots()

    def load(first_session: int, sessions: int) -> None:
        for s in range(first_session, first_session + sessions):
            transcript: list[dict] = []
            for turn in range(40):
                transcript = [*transcript, {"role": "user", "content": f"question {turn} of session {s}"},
                              {"role": "assistant", "content": f"answer {turn} of {s:08d} " * 70}]
                snapshots.remember(f"session-{s}", SessionSnapshot(run_id=f"r{turn}", last_seq=turn, transcript=transcript))

    was_tracing = tracemalloc.is_tracing()
    tracemalloc.start()
    try:
        before = _traced_after_gc()
        load(0, 100)
        full = _traced_after_gc() - before
        load(100, 200)
        later = _traced_after_gc() - before
    finally:
        if not was_tracing:
            tracemalloc.stop()
    assert snapshots.bytes <= DEFAULT_MAX_BYTES
    assert full <= DEFAULT_MAX_BYTES * 1.25, full
    assert later <= full * 1.01, (full, later)
