"""Two Agent Service replicas in this process over one database, and a model whose pace the test sets."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from sqlalchemy import select

from agent_service.models import AgentEvent, AgentRun
from agent_service.runs.leases import LeaseKeeper
from agent_service.runs.manager import RunManager
from agent_service.settings import AgentServiceSettings
from shared.llm.base import CompletionOptions, LLMEvent, LLMMessage, TextDelta, ToolSpec
from shared.llm.builtin import BuiltinProvider

# Seqs a claim reserves by default: a run ended by another replica has its ERROR after them.
SEQ_BLOCK: int = AgentServiceSettings.model_fields["seq_reserve_block"].default
# Short leases so that expiry happens within a test; renewals several times per lease.
REPLICA_SETTINGS: dict[str, Any] = {"lease_seconds": 2.0, "lease_renew_seconds": 0.2, "replay_poll_seconds": 0.05}
# The built-in model's fixed reply to this is a few dozen words: enough answer chunks to hold a run
# in the middle of its answer.
MESSAGE = "hello there, who are you?"


class GatedProvider(BuiltinProvider):
    """The built-in model, which stops after ``hold_after`` answer chunks until ``gate`` opens.

    ``held`` is set when it stops: the run is then ACTIVE, mid-answer, with events in the log.
    """

    def __init__(self, hold_after: int) -> None:
        super().__init__(first_token_delay=0, chunk_delay=0.005)
        self.hold_after = hold_after
        self.held = asyncio.Event()
        self.gate = asyncio.Event()

    async def stream(
        self, messages: Sequence[LLMMessage], *, tools: Sequence[ToolSpec] = (),
        options: CompletionOptions | None = None,
    ) -> AsyncIterator[LLMEvent]:
        chunks = 0
        async for event in super().stream(messages, tools=tools, options=options or CompletionOptions()):
            if isinstance(event, TextDelta):
                if chunks == self.hold_after:
                    self.held.set()
                    await self.gate.wait()
                chunks += 1
            yield event


def keeper(agent) -> LeaseKeeper:
    return agent.app.state.agent.lease_keeper


def manager(agent) -> RunManager:
    return agent.app.state.agent.run_manager


async def wait_for_status(agent, session_id: str, status: str, max_passes: int = 50) -> dict[str, Any]:
    """Let ``agent``'s lease keeper run pass after pass until the session has ``status``."""
    for _ in range(max_passes):
        current = await agent.status(session_id)
        if current["status"] == status:
            return current
        await keeper(agent).wait_for_passes(1)
    raise AssertionError(f"session {session_id} still {current['status']} after {max_passes} passes, not {status}")


async def log_events(db, session_id: str) -> list[AgentEvent]:
    async with db.sessionmaker() as s:
        result = await s.execute(select(AgentEvent).where(AgentEvent.session_id == session_id).order_by(AgentEvent.seq))
        return list(result.scalars())


async def run_row(db, run_id: str) -> AgentRun:
    async with db.sessionmaker() as s:
        run = await s.get(AgentRun, run_id)
        assert run is not None
        return run
