"""A run's answer deltas that arrive together travel as one ANSWER_CHUNK (STREAM_COALESCE_MS, on by
default): a fast model's tokens make few events with the identical answer and contiguous seqs, the
first token alone and at once; 0 gives one event per delta; a reader resuming with Last-Event-ID in
the middle of a coalesced stream sees no gap and no duplicate."""

from __future__ import annotations

from shared.llm.openai import OpenAICompatibleProvider
from tests.integration.agent_service.conftest import assert_contiguous
from tests.support.fake_openai import FakeOpenAI, running_fake_openai

TOKENS = 400
ANSWER = " ".join(f"token{i}" for i in range(TOKENS))  # what the fake model streams, one word per delta


async def _run(agent_factory, fake: FakeOpenAI, **settings):
    async with running_fake_openai(fake) as (_, api_root):
        provider = OpenAICompatibleProvider(base_url=api_root, model="fake-model")
        try:
            async with agent_factory(provider=provider, **settings) as agent:
                return agent.settings, await agent.execute("hello")
        finally:
            await provider.aclose()


async def test_a_fast_model_s_tokens_travel_in_far_fewer_chunks_with_the_identical_answer(agent_factory) -> None:
    settings, result = await _run(agent_factory, FakeOpenAI(tokens=TOKENS, token_delay_ms=0))
    assert settings.stream_coalesce_ms == 25  # the default
    chunks = result.of_type("ANSWER_CHUNK")
    assert result.last.type.value == "COMPLETE" and result.last.data["answer"] == ANSWER
    assert "".join(c.data["text"] for c in chunks) == ANSWER
    # 400 deltas in well under a second: a chunk per 25 ms at most, the first token alone.
    assert 2 <= len(chunks) <= TOKENS // 10, len(chunks)
    assert chunks[0].data["text"] == "token0"
    assert_contiguous(result.events)


async def test_off_one_chunk_per_delta(agent_factory) -> None:
    settings, result = await _run(agent_factory, FakeOpenAI(tokens=TOKENS, token_delay_ms=0), stream_coalesce_ms=0)
    assert settings.stream_coalesce_ms == 0
    chunks = result.of_type("ANSWER_CHUNK")
    assert [c.data["text"] for c in chunks] == [f"token{i}" if i == 0 else f" token{i}" for i in range(TOKENS)]
    assert result.last.data["answer"] == ANSWER
    assert_contiguous(result.events)


async def test_resuming_with_last_event_id_in_the_middle_of_a_coalesced_stream(agent_factory) -> None:
    # 1 ms per token: the answer streams for at least 0.4 s, in chunks of several tokens each.
    fake = FakeOpenAI(tokens=TOKENS, token_delay_ms=1)
    async with running_fake_openai(fake) as (_, api_root):
        provider = OpenAICompatibleProvider(base_url=api_root, model="fake-model")
        try:
            async with agent_factory(provider=provider) as agent:
                first = await agent.execute("hello", stop_after=3)
                assert first.last.type.value == "ANSWER_CHUNK"  # dropped in the middle of the answer
                session_id = first.events[0].session_id
                rest = await agent.replay(session_id, first.events[-1].seq)
                # And a reader that comes back once the run is over reads the same events again.
                whole = await agent.replay(session_id, 0)
        finally:
            await provider.aclose()
    events = first.events + rest.events
    assert_contiguous(events)  # no gap, no duplicate
    assert rest.last.type.value == "COMPLETE" and rest.last.data["answer"] == ANSWER
    chunks = [e for e in events if e.type.value == "ANSWER_CHUNK"]
    assert "".join(c.data["text"] for c in chunks) == ANSWER
    assert len(chunks) < TOKENS // 3, len(chunks)  # coalesced: several tokens a chunk
    assert [(e.seq, e.type, e.data) for e in whole.events] == [(e.seq, e.type, e.data) for e in events]
