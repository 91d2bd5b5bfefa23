"""The per-token figures of the benchmarks (``loadtests.common``): tokens counted from the model's
stamps whatever the events that carried them, CPU per 1,000 of them, percentiles, the rounds' medians
and the issue's targets read off them; and the fake model's clock, which sends every token due when
its timer wakes, each with its own stamp."""

from __future__ import annotations

import argparse
import re
from collections import Counter

import pytest

from loadtests.capacity_client import Share
from loadtests.common import Pace, number_list, speed_targets, streams_for, summarize_cells, token_figures
from tests.support.fake_openai import FakeOpenAI, _PacedStream


def _share(latencies: list[float], *, events: int, streams: int = 2, rates: list[float] = (), first: list[float] = ()):
    share = Share(streams=streams, completed=streams, events=events)
    share.latencies.extend(latencies)
    share.model_rates.extend(rates)
    share.first_token.extend(first)
    share.first_answer.extend([0.2 + f for f in first])
    return share


def test_cpu_is_counted_per_token_delivered_not_per_event() -> None:
    # 400 tokens arrived in 20 events (chunks of 20): the CPU divides by the tokens.
    share = _share([0.001] * 380 + [0.030] * 20, events=20, rates=[1990.0, 2000.0], first=[0.001, 0.002])
    figures = token_figures(share, {"agent_service": 0.2, "client": 0.04}, wall=0.5)

    assert figures["tokens"] == 400 and figures["events_per_1k_tokens"] == 50.0
    assert figures["cpu_ms_per_1k_tokens"] == {"agent_service": 500.0, "client": 100.0}
    assert figures["cpu_cores"] == {"agent_service": 0.4, "client": 0.08}
    assert figures["tokens_per_s"] == 800.0
    assert figures["latency_ms"]["p50"] == 1.0 and figures["latency_ms"]["p99"] == 30.0
    assert figures["latency_ms"]["p95"] == pytest.approx(1.0 + 29 * 0.05, abs=0.01)  # interpolated at rank 379.05
    assert figures["model_tokens_per_s"] == {"p50": 1995.0, "min": 1990.0}
    assert figures["first_token_ms"]["p50"] == 1.5 and figures["first_answer_ms"]["p50"] == 201.5


def test_a_cell_with_no_token_delivered_has_no_ratio_rather_than_a_division_by_zero() -> None:
    share = Share(streams=1)
    share.errors["HTTP 503 with Retry-After"] += 1
    figures = token_figures(share, {"agent_service": 0.01}, wall=0.1)
    assert figures["tokens"] == 0 and figures["errors"] == 1
    assert figures["cpu_ms_per_1k_tokens"] == {"agent_service": None}
    assert figures["events_per_1k_tokens"] is None and figures["latency_ms"]["p95"] is None
    assert figures["model_tokens_per_s"] is None


def test_speeds_and_streams() -> None:
    assert number_list("50,500, 2000") == [50.0, 500.0, 2000.0]
    with pytest.raises(argparse.ArgumentTypeError):
        number_list("50,-1")
    assert [streams_for(s, 2000) for s in (50, 500, 2000, 5000)] == [40, 4, 1, 1]
    pace = Pace(2000, 8000, 200)
    assert pace.delay_ms == 0.5 and pace.seconds == pytest.approx(4.2)


def _row(speed: float, cell: str, proc: str, cpu: float, p95: float, r: int = 0) -> dict:
    return {"speed": speed, "cell": cell, "round": r, "errors": 0, "events_per_1k_tokens": 1000.0,
            "model_tokens_per_s": {"p50": speed, "min": speed}, "cpu_ms_per_1k_tokens": {proc: cpu},
            "latency_ms": {"p50": p95 / 2, "p95": p95, "p99": p95 * 1.2},
            "first_token_ms": {"p50": 1.0, "p95": 2.0}, "first_answer_ms": {"p50": 201.0, "p95": 210.0},
            "load_average_1m_after": 1.0}


def test_rounds_are_summarized_by_their_median_and_the_targets_read_off_it() -> None:
    rows = [
        *(_row(2000, "agent/c0", "agent_service", cpu, 1.0, r) for r, cpu in enumerate((170.0, 160.0, 400.0))),
        *(_row(2000, "agent/c25", "agent_service", cpu, 30.0, r) for r, cpu in enumerate((9.0, 11.0, 10.0))),
        _row(2000, "floor", "floor_relay", 60.0, 0.5),
        _row(50, "agent/c0", "agent_service", 200.0, 2.0),
        _row(50, "agent/c25", "agent_service", 120.0, 36.0),
        _row(50, "floor", "floor_relay", 70.0, 1.0),
    ]
    summary = summarize_cells(rows)
    assert summary["2000"]["agent/c0"]["cpu_ms_per_1k_tokens"] == {"agent_service": 170.0}
    assert summary["2000"]["agent/c0"]["cpu_ms_per_1k_tokens_rounds"] == {"agent_service": [170.0, 160.0, 400.0]}
    assert summary["2000"]["agent/c25"]["rounds"] == 3

    targets = speed_targets(summary, "agent")
    assert targets["agent/c25 at 2000 tokens/s: >= 10x below coalescing off"] == {"off_over_on": 17.0, "verdict": "MET"}
    assert targets["agent/c25 at 2000 tokens/s: below the relay"]["verdict"] == "MET"
    assert targets["agent/c25 at 50 tokens/s: <= 1.5x the relay"] == {"on_over_relay": 1.71, "verdict": "MISSED"}
    # 36 ms at 50 tokens/s is over the 25 ms budget + 10 ms.
    assert targets["agent/c25: per-token p95 <= 35 ms at every speed"] == {"worst_p95_ms": 36.0, "verdict": "MISSED"}
    assert speed_targets(summary, None) == {}


async def test_the_fake_model_sends_every_token_due_in_one_write_each_with_its_own_stamp() -> None:
    fake = FakeOpenAI(tokens=10, token_delay_ms=0.5, stamp=True)
    writes: list[dict] = []

    async def send(message: dict) -> None:
        writes.append(message)

    stream = _PacedStream(fake, send, False, start=100.0)
    assert await stream.step(100.0) == pytest.approx(100.0005)  # the role and token 0
    # The timer woke 3.1 ms late: tokens 1 to 6 (due at 100.0005 ... 100.0030) go out together.
    assert await stream.step(100.0031) == pytest.approx(100.0035)
    # Exactly on a token's time: the float division must not leave it for a later wake-up.
    assert await stream.step(100.0 + 7 * 0.0005) == pytest.approx(100.0040)
    assert await stream.step(101.0) is None  # tokens 8 and 9, then the end
    assert stream.done.done()

    bodies = [w["body"].decode() for w in writes]
    stamps = [re.findall(r"t\d+\.\d{6}", b) for b in bodies]
    assert [len(s) for s in stamps] == [1, 6, 1, 2]
    assert [b.count("data: ") for b in bodies] == [2, 6, 1, 2 + 2]  # one chunk per token; finish and [DONE]
    assert [w["more_body"] for w in writes] == [True, True, True, False]
    assert Counter(b.count("[DONE]") for b in bodies) == Counter({0: 3, 1: 1})


async def test_a_reply_paced_at_zero_delay_is_written_whole_at_its_start() -> None:
    fake = FakeOpenAI(tokens=3, token_delay_ms=0.5, stamp=True)
    fake.token_delay_ms = 0.0
    writes: list[dict] = []

    async def send(message: dict) -> None:
        writes.append(message)

    stream = _PacedStream(fake, send, False, start=5.0)
    assert await stream.step(5.0) is None
    assert len(writes) == 1 and len(re.findall(r"t\d+\.\d{6}", writes[0]["body"].decode())) == 3
