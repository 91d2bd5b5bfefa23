"""The remembered end states of sessions this process completed."""

from __future__ import annotations

from agent_service.models import AgentSession
from agent_service.runs.snapshots import SessionSnapshot, SessionSnapshots
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


def test_a_snapshot_matches_only_the_session_as_its_run_left_it() -> None:
    snapshot = _snapshot()
    left = AgentSession(status=SessionStatus.COMPLETED.value, current_run_id="r1", last_seq=7)
    assert snapshot.matches(left)
    assert not snapshot.matches(AgentSession(status=SessionStatus.ACTIVE.value, current_run_id="r1", last_seq=7))
    assert not snapshot.matches(AgentSession(status=SessionStatus.COMPLETED.value, current_run_id="r2", last_seq=7))
    assert not snapshot.matches(AgentSession(status=SessionStatus.COMPLETED.value, current_run_id="r1", last_seq=9))
