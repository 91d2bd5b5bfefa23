"""The capacity benchmark's machinery on a tiny level, so that it keeps working: the stamped, paced
fake model, both targets through the real services, the client processes and the figures."""

from __future__ import annotations

import json
import re
import time

import httpx

from loadtests.bench_capacity import main, parse_args
from loadtests.common import write_results
from tests.support.fake_openai import FakeOpenAI, running_fake_openai


async def _reply_text(fake: FakeOpenAI) -> str:
    async with running_fake_openai(fake) as (_, api), httpx.AsyncClient() as client:
        r = await client.post(f"{api}/chat/completions", json={"messages": [], "stream": True})
    parts = []
    for line in r.text.splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                parts.append(choice["delta"].get("content") or "")
    assert r.text.rstrip().endswith("data: [DONE]")
    return "".join(parts)


async def test_the_shared_clock_sends_the_same_default_reply() -> None:
    paced = await _reply_text(FakeOpenAI(tokens=4, token_delay_ms=1, shared_clock=True))
    assert paced == await _reply_text(FakeOpenAI(tokens=4, token_delay_ms=1)) == "token0 token1 token2 token3"


async def test_stamped_tokens_carry_their_send_time() -> None:
    asked = time.time()
    text = await _reply_text(FakeOpenAI(tokens=3, token_delay_ms=1, stamp=True, shared_clock=True))
    answered = time.time()
    stamps = [float(s) for s in re.findall(r"t(\d+\.\d{6})", text)]
    assert len(stamps) == 3 and text.count(" ") == 2
    assert asked <= stamps[0] and stamps == sorted(stamps) and stamps[-1] <= answered
    # Token i is due i ms after the stream starts, and the stream starts after it was asked for. The
    # first token may itself be late, so the spacing between stamps has no lower bound; this does.
    assert stamps[-1] - asked >= 0.002


async def test_a_tiny_sweep_of_both_targets(tmp_path) -> None:
    out = tmp_path / "capacity.json"
    args = parse_args(["--target", "both", "--levels", "2", "--tokens", "5", "--ttft-ms", "0",
                       "--token-delay-ms", "5", "--clients", "2", "--settle-s", "0", "--out", str(out)])
    results = await main(args)
    write_results(args.out, results)

    for target in ("agent", "chat"):
        (row,) = results[target]["levels"]
        assert row["error_reasons"] == {} and row["completed"] == 2
        assert row["tokens"] == 10  # every stamped token reached a client, one from each process
        # At least an answer chunk and the end per stream: a chunk may hold many tokens (STREAM_COALESCE_MS).
        assert row["events"] >= 4 and row["events_per_1k_tokens"] == round(row["events"] / 10 * 1000, 1)
        assert 0 <= row["latency_ms"]["p50"] <= row["latency_ms"]["p95"] <= row["latency_ms"]["max"]
        assert row["cpu_s"]["agent_service"] > 0 and row["cpu_ms_per_1k_tokens"]["agent_service"] > 0
        assert len(row["first_answer_ms"]) == 2 and row["model_tokens_per_s"]["min"] > 0
        assert results[target]["capacity_streams"] == (2 if row["passed"] else 0)
    assert results["chat"]["levels"][0]["cpu_s"]["conversation_service"] > 0
    assert json.loads(out.read_text())["machine"]["nproc"]


async def test_the_floor_target_relays_the_same_streams_with_no_service(tmp_path) -> None:
    args = parse_args(["--target", "floor", "--levels", "2", "--tokens", "5", "--ttft-ms", "0",
                       "--token-delay-ms", "5", "--clients", "1", "--settle-s", "0", "--out", str(tmp_path / "f.json")])
    results = await main(args)

    (row,) = results["floor"]["levels"]
    assert row["error_reasons"] == {} and row["completed"] == 2
    assert row["tokens"] == 10 and row["events"] == 12  # 5 answer chunks and the end, per stream
    # Measured per process, the relay in place of the services (a level this small may read 0 ticks).
    assert set(row["cpu_s"]) == {"floor_relay", "fake_model", "client"}
    assert results["database"] is None


async def test_the_fake_model_paced_between_requests_sends_the_new_length() -> None:
    fake = FakeOpenAI(tokens=4, token_delay_ms=1, shared_clock=True)
    async with running_fake_openai(fake) as (_, api), httpx.AsyncClient() as client:
        r = await client.post(api.removesuffix("/v1") + "/pace", json={"tokens": 6, "token_delay_ms": 0.5})
        assert r.json() == {"tokens": 6, "ttft_ms": 0.0, "token_delay_ms": 0.5, "write_every_ms": 1.0}
        assert (await client.post(api.removesuffix("/v1") + "/pace", json={"tokens": -1})).status_code == 400
    assert await _reply_text(fake) == "token0 token1 token2 token3 token4 token5"
