"""Admission: the bound holds, the queue is first come first served and says where each stands, the
rest is refused at once with a Retry-After, and a released slot (done, or cancelled while queued)
always frees its place."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from shared.admission import Admission, AdmissionMetrics, QueuedWait, Refused


def _metrics() -> tuple[CollectorRegistry, AdmissionMetrics]:
    r = CollectorRegistry()
    return r, AdmissionMetrics(Gauge("in_flight", "", registry=r), Gauge("queued", "", registry=r),
                               Counter("refused", "", registry=r), Histogram("waited_seconds", "", registry=r))


async def test_the_bound_holds_and_queued_slots_start_first_come_first_served() -> None:
    registry, metrics = _metrics()
    admission = Admission(max_in_flight=2, max_queued=2, metrics=metrics)
    first, second = admission.admit(), admission.admit()
    third, fourth = admission.admit(), admission.admit()
    assert [s.granted for s in (first, second, third, fourth)] == [True, True, False, False]
    assert (admission.in_flight, admission.queued) == (2, 2)
    with pytest.raises(Refused) as refused:
        admission.admit()
    assert refused.value.retry_after_s >= 1 and (refused.value.in_flight, refused.value.queued) == (2, 2)
    assert registry.get_sample_value("refused_total") == 1
    assert (registry.get_sample_value("in_flight"), registry.get_sample_value("queued")) == (2, 2)

    started: list[str] = []
    third_started = asyncio.Event()

    async def run(name: str, slot) -> None:
        await slot.wait(lambda _where: None)
        started.append(name)
        if name == "third":
            third_started.set()

    waiting = [asyncio.create_task(run("third", third)), asyncio.create_task(run("fourth", fourth))]
    await asyncio.sleep(0.01)
    assert started == []
    first.release()
    await asyncio.wait_for(third_started.wait(), 1)
    assert started == ["third"] and admission.in_flight == 2 and admission.queued == 1
    second.release()
    await asyncio.wait_for(asyncio.gather(*waiting), 1)
    assert started == ["third", "fourth"]
    third.release()
    fourth.release()
    fourth.release()  # idempotent
    assert (admission.in_flight, admission.queued) == (0, 0)
    assert (registry.get_sample_value("in_flight"), registry.get_sample_value("queued")) == (0, 0)
    assert registry.get_sample_value("waited_seconds_count") == 2, "the two queued slots' waits"


async def test_a_queued_slot_reports_its_place_and_a_cancelled_one_leaves_the_queue() -> None:
    admission = Admission(max_in_flight=1, max_queued=3)
    running = admission.admit()
    ahead, behind = admission.admit(), admission.admit()
    reports: list[QueuedWait] = []

    async def waiter(slot) -> None:
        try:
            await slot.wait(reports.append)
        finally:
            slot.release()

    cancelled = asyncio.create_task(waiter(ahead))
    await asyncio.sleep(0)
    waiting = asyncio.create_task(behind.wait(reports.append))
    await asyncio.sleep(0.01)
    assert [(r.position, r.max_in_flight) for r in reports] == [(1, 1), (2, 1)]
    assert reports[1].wait_s > reports[0].wait_s > 0
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert admission.queued == 1
    running.release()
    await asyncio.wait_for(waiting, 1)
    assert behind.granted and admission.in_flight == 1 and admission.queued == 0


async def test_retry_after_grows_with_the_queue_and_the_time_slots_are_held() -> None:
    admission = Admission(max_in_flight=1, max_queued=10)
    slot = admission.admit()
    empty = admission.retry_after_s()
    queued = [admission.admit() for _ in range(10)]
    assert admission.retry_after_s() > empty
    slot.release()
    for s in queued:
        s.release()
    assert 1 <= admission.retry_after_s() <= 300


async def test_a_service_error_stands_for_the_refusal() -> None:
    class Busy(Exception):
        pass

    admission = Admission(max_in_flight=1, max_queued=0, refusal=lambda refused: Busy(refused.retry_after_s))
    admission.admit()
    with pytest.raises(Busy):
        admission.admit()


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError):
        Admission(max_in_flight=0, max_queued=1)
