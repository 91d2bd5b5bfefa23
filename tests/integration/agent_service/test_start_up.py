"""What the Agent Service does while it starts rather than during its first requests."""

from __future__ import annotations

from shared import tokens


async def test_the_tokenizer_is_loaded_before_the_service_answers(agent_factory) -> None:
    # A run counts tokens (the memory's budget, rate limits, the usage a model does not send). Loaded at
    # the first count, the tokenizer held the event loop for up to a second in the middle of a burst of
    # runs; the service loads it while it starts instead.
    tokens.get_encoding.cache_clear()
    async with agent_factory() as agent:
        assert tokens.get_encoding.cache_info().currsize == 1
        result = await agent.execute("hello")
        assert result.last.type.value == "COMPLETE"
        assert tokens.get_encoding.cache_info().misses == 1  # the run used the encoding loaded at start
