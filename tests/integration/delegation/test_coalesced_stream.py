"""What arrived together is one unit in the chat too (STREAM_COALESCE_MS, on by default): the direct
reply's model deltas become few ``message.delta`` frames with the identical text; 0 gives one frame
per delta; a WebSocket client that leaves in the middle of a coalesced answer and comes back with
``after_seq`` sees no gap and no duplicate, on the direct path and on an agent's reply (whose deltas
carry their ``offset``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import httpx

from conversation_service.settings import ConversationSettings
from shared.llm.openai import OpenAICompatibleProvider
from tests.integration.conversation_service.support import (
    collect_until,
    connect,
    make_settings,
    recv_frame,
    running,
)
from tests.integration.delegation.stack import (
    Stack,
    agent_service,
    chat_service,
    deltas_text,
    final_of,
    frames_of,
)
from tests.support.fake_openai import FakeOpenAI, running_fake_openai

TOKENS = 400
ANSWER = " ".join(f"token{i}" for i in range(TOKENS))  # what the fake model streams, one word per delta


def _completed(frame: dict) -> bool:
    return frame["type"] == "message.completed"


def _assistant_deltas(frames: list[dict]) -> list[dict]:
    return frames_of(frames, "message.delta")


async def _direct_reply(database_url: str, monkeypatch, fake: FakeOpenAI, **settings) -> tuple[float, list[dict]]:
    async with running_fake_openai(fake) as (_, api_root):
        monkeypatch.setenv("LLM_PROVIDER", "openai")
        monkeypatch.setenv("LLM_BASE_URL", api_root)
        chat_settings = make_settings(database_url, **settings)
        async with chat_service_alone(chat_settings) as (base, stack):
            cid = await stack.conversation()
            async with await connect(base, cid, "alice") as ws:
                sent = await stack.send(cid, "Tell me about the sea")
                assert sent.status_code == 202 and sent.json()["route"]["target"] == "direct_llm"
                frames = await collect_until(ws, _completed)
    return chat_settings.stream_coalesce_ms, frames


@asynccontextmanager
async def chat_service_alone(settings: ConversationSettings) -> AsyncIterator[tuple[str, Stack]]:
    """The ConversationService on its own (its direct path), with the delegation stack's helpers."""
    async with running(settings) as (url, app), httpx.AsyncClient(timeout=30) as http:
        yield url, Stack(chat_url=url, chat_app=app, agent_url=None, http=http)


async def test_a_fast_model_s_direct_reply_is_few_frames_with_the_identical_text(database_url, monkeypatch) -> None:
    budget, frames = await _direct_reply(database_url, monkeypatch, FakeOpenAI(tokens=TOKENS, token_delay_ms=0))
    assert budget == 25  # the default
    deltas = _assistant_deltas(frames)
    assert "".join(d["data"]["text"] for d in deltas) == ANSWER == final_of(frames)["data"]["content"]
    # 400 deltas in well under a second: a frame per 25 ms at most, the first token alone.
    assert 2 <= len(deltas) <= TOKENS // 10, len(deltas)
    assert deltas[0]["data"]["text"] == "token0"
    seqs = [f["seq"] for f in frames]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))


async def test_off_the_direct_reply_is_one_frame_per_delta(database_url, monkeypatch) -> None:
    budget, frames = await _direct_reply(
        database_url, monkeypatch, FakeOpenAI(tokens=TOKENS, token_delay_ms=0), stream_coalesce_ms=0)
    assert budget == 0
    deltas = _assistant_deltas(frames)
    assert [d["data"]["text"] for d in deltas] == [f"token{i}" if i == 0 else f" token{i}" for i in range(TOKENS)]


async def _leave_and_resume(base: str, stack, cid: str, content: str) -> tuple[list[dict], list[dict]]:
    """A reference client sees the reply live; another leaves after its third ``message.delta`` and
    comes back after the last seq it saw. Both clients' frames, from the user's message to the end."""
    async with await connect(base, cid, "alice", after_seq=0) as reference:
        async with await connect(base, cid, "alice", after_seq=0) as ws:
            await stack.send(cid, content)
            seen: list[dict] = []
            while len(frames_of(seen, "message.delta")) < 3:
                seen.append(await recv_frame(ws))
            assert not any(_completed(f) for f in seen)  # left in the middle of the answer
        everything = await collect_until(reference, _completed, timeout=30)
        async with await connect(base, cid, "alice", after_seq=seen[-1]["seq"]) as ws:
            rest = await collect_until(ws, _completed, timeout=30)
    return seen + rest, everything


async def test_a_client_resuming_in_the_middle_of_a_coalesced_direct_reply(database_url, monkeypatch) -> None:
    # 1 ms per token: the answer streams for at least 0.4 s, in frames of several tokens each.
    async with running_fake_openai(FakeOpenAI(tokens=TOKENS, token_delay_ms=1)) as (_, api_root):
        monkeypatch.setenv("LLM_PROVIDER", "openai")
        monkeypatch.setenv("LLM_BASE_URL", api_root)
        async with chat_service_alone(make_settings(database_url)) as (base, stack):
            cid = await stack.conversation()
            resumed, everything = await _leave_and_resume(base, stack, cid, "Tell me about the sea")
    assert resumed == everything  # no gap, no duplicate, the same frames in the same order
    seqs = [f["seq"] for f in resumed]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    deltas = _assistant_deltas(resumed)
    assert "".join(d["data"]["text"] for d in deltas) == ANSWER == final_of(resumed)["data"]["content"]
    assert len(deltas) < TOKENS // 3, len(deltas)  # coalesced: several tokens a frame


async def test_a_client_resuming_in_the_middle_of_a_coalesced_agent_reply(database_factory, tmp_path) -> None:
    async with AsyncExitStack() as exits:
        _, api_root = await exits.enter_async_context(running_fake_openai(FakeOpenAI(tokens=TOKENS, token_delay_ms=1)))
        provider = OpenAICompatibleProvider(base_url=api_root, model="fake-model")
        exits.push_async_callback(provider.aclose)
        agent_url = await exits.enter_async_context(
            agent_service(await database_factory("agent"), tmp_path, provider=provider))
        stack = await exits.enter_async_context(chat_service(await database_factory("chat"), agent_url))
        cid = await stack.conversation()
        resumed, everything = await _leave_and_resume(stack.chat_url, stack, cid, "/agent tell me about the sea")
    assert resumed == everything
    seqs = [f["seq"] for f in resumed]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    final = final_of(resumed)
    message_id = final["data"]["message_id"]
    deltas = [d for d in _assistant_deltas(resumed) if d["data"]["message_id"] == message_id]
    # Each delta starts where the text before it ends: the offsets leave no gap and repeat nothing.
    offsets = [d["data"]["offset"] for d in deltas]
    lengths = [len(d["data"]["text"]) for d in deltas]
    assert offsets == [sum(lengths[:i]) for i in range(len(deltas))]
    assert deltas_text(resumed, message_id) == ANSWER == final["data"]["content"]
    assert len(deltas) < TOKENS // 3, len(deltas)  # the Agent Service's chunks: several tokens each
