"""``agent_event_overhead_seconds``: one observation per ANSWER_CHUNK (the model's deltas that
arrived together, coalesced), none for the terminal event, read from the service's own ``/metrics``."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from shared.llm.openai import OpenAICompatibleProvider
from tests.support.fake_openai import FakeOpenAI, TextReply, running_fake_openai


def _histogram(text: str, name: str) -> tuple[float, float]:
    """(count, sum) of an unlabelled histogram in a Prometheus exposition."""
    count = total = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"{name}_count":
                count = sample.value
            elif sample.name == f"{name}_sum":
                total = sample.value
    assert count is not None and total is not None, f"{name} is not exposed"
    return count, total


async def test_overhead_observed_once_per_answer_chunk(agent_factory) -> None:
    fake = FakeOpenAI()
    fake.enqueue(TextReply(tokens=40))
    async with running_fake_openai(fake) as (_, api_root):
        provider = OpenAICompatibleProvider(base_url=api_root, model="fake-model", api_key="sk-test")
        try:
            # A long group-commit window keeps every chunk unwritten until COMPLETE, so each one
            # reaches the stream from the run's memory (snapshot or live), never from the log.
            async with agent_factory(provider=provider, group_commit_ms=60_000) as agent:
                result = await agent.execute("hello")
                metrics = (await agent.http.get("/metrics")).text
        finally:
            await provider.aclose()
    chunks = result.of_type("ANSWER_CHUNK")
    assert result.last.type.value == "COMPLETE"
    # 40 deltas, coalesced (STREAM_COALESCE_MS on): fewer chunks, the same text.
    assert 1 <= len(chunks) < 40
    assert "".join(c.data["text"] for c in chunks) == result.last.data["answer"]
    count, total = _histogram(metrics, "agent_event_overhead_seconds")
    assert count == len(chunks)
    assert 0 < total < 60
