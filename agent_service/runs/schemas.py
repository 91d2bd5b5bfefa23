"""Run-domain types that do not cross the wire (the wire contract is ``shared.protocol``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RunHandle:
    """The run an execute started or joined: its stream replays from ``first_seq``."""

    session_id: str
    run_id: str
    first_seq: int
    joined: bool = False
