"""Admission of runs against a real server (SQLite and PostgreSQL): at most
AGENT_SERVICE_MAX_RUNS_IN_FLIGHT runs call the model at once, the next ones wait visibly (WAITING,
limit capacity) and start in turn, the one past the queue is answered 503 with Retry-After at once,
and every admitted run completes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from prometheus_client.parser import text_string_to_metric_families

from shared.llm.base import CompletionOptions, LLMEvent, LLMMessage, ToolSpec
from shared.llm.builtin import BuiltinProvider


class GatedModel(BuiltinProvider):
    """The built-in model, holding every call at its start until ``gate`` opens; counts the calls
    under way and the most there ever were at once."""

    def __init__(self) -> None:
        super().__init__(first_token_delay=0, chunk_delay=0)
        self.gate = asyncio.Event()
        self.calls = 0
        self.most = 0
        self.started = asyncio.Condition()

    async def stream(
        self, messages: Sequence[LLMMessage], *, tools: Sequence[ToolSpec] = (),
        options: CompletionOptions | None = None,
    ) -> AsyncIterator[LLMEvent]:
        async with self.started:
            self.calls += 1
            self.most = max(self.most, self.calls)
            self.started.notify_all()
        try:
            await self.gate.wait()
            async for event in super().stream(messages, tools=tools, options=options or CompletionOptions()):
                yield event
        finally:
            self.calls -= 1

    async def until_calls(self, n: int) -> None:
        async with self.started:
            await self.started.wait_for(lambda: self.calls >= n)


async def _metric(agent, name: str) -> float:
    text = (await agent.http.get("/metrics")).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


async def test_the_bound_holds_the_queue_waits_visibly_and_the_overflow_gets_503_at_once(agent_factory) -> None:
    model = GatedModel()
    async with agent_factory(provider=model, max_runs_in_flight=2, max_queued_runs=2) as agent:
        waiting = {i: asyncio.Event() for i in range(4)}

        def saw(i: int):
            def on_event(event) -> None:
                if event.type.value == "WAITING":
                    waiting[i].set()
            return on_event

        streams = [asyncio.create_task(agent.execute(f"hello {i}", on_event=saw(i))) for i in range(2)]
        await asyncio.wait_for(model.until_calls(2), 10)
        streams += [asyncio.create_task(agent.execute(f"hello {i}", on_event=saw(i))) for i in range(2, 4)]
        await asyncio.wait_for(asyncio.gather(waiting[2].wait(), waiting[3].wait()), 10)

        refused = await asyncio.wait_for(agent.execute("one too many"), 5)
        assert refused.status == 503 and refused.body["error"] == "overloaded", refused.body
        assert 1 <= int(refused.headers["Retry-After"]) <= 300
        assert refused.body["detail"]["in_flight"] == 2 and refused.body["detail"]["queued"] == 2
        assert await _metric(agent, "agent_runs_in_flight") == 2
        assert await _metric(agent, "agent_runs_queued") == 2
        assert await _metric(agent, "agent_runs_refused_total") == 1

        model.gate.set()
        results = await asyncio.wait_for(asyncio.gather(*streams), 30)
        assert [r.last.type.value for r in results] == ["COMPLETE"] * 4
        assert model.most == 2, "never more runs at the model than the bound"
        for queued in results[2:]:
            types = [e.type.value for e in queued.events]
            assert types.index("WAITING") < types.index("ANSWER_CHUNK")
            [wait, *_] = queued.of_type("WAITING")
            assert wait.data["limit"] == "capacity" and "capacity" in wait.data["reason"] and wait.data["wait_s"] >= 0
        assert all(not r.of_type("WAITING") for r in results[:2]), "runs admitted at once do not wait"
        async with asyncio.timeout(5):
            while agent.app.state.agent.run_manager.active():
                await asyncio.sleep(0.01)  # a run's task ends (and gives its place back) just after its COMPLETE
        assert await _metric(agent, "agent_runs_in_flight") == 0
        assert await _metric(agent, "agent_runs_queued") == 0


async def test_a_queued_run_cancelled_ends_visibly_and_gives_its_place_up(agent_factory) -> None:
    model = GatedModel()
    async with agent_factory(provider=model, max_runs_in_flight=1, max_queued_runs=1) as agent:
        running = asyncio.create_task(agent.execute("hello"))
        await asyncio.wait_for(model.until_calls(1), 10)
        waits: list = []
        queued = asyncio.create_task(agent.execute(
            "hello again", on_event=lambda e: waits.append(e) if e.type.value == "WAITING" else None))
        async with asyncio.timeout(10):
            while not waits:
                await asyncio.sleep(0.01)  # the queued run's first event arriving on its stream
        cancel = await agent.http.post(f"/api/v1/agent/sessions/{waits[0].session_id}/cancel", headers=agent.headers())
        assert cancel.status_code == 200, cancel.text
        ended = await asyncio.wait_for(queued, 10)
        assert ended.last.type.value == "ERROR" and ended.last.data["code"] == "CANCELLED"
        assert await _metric(agent, "agent_runs_queued") == 0
        assert model.calls == 1, "the cancelled run never called the model"
        model.gate.set()
        assert (await asyncio.wait_for(running, 10)).last.type.value == "COMPLETE"
