"""``ReplyStops``: a stop cancels the watched reply's task and says it was a stop; a cancel for
any other reason (a shutdown) does not look like one."""

from __future__ import annotations

import asyncio

from conversation_service.turns.stops import ReplyStops


async def _reply(stops: ReplyStops, turn_id: str, started: asyncio.Event) -> str:
    with stops.watch(turn_id) as watch:
        try:
            started.set()
            await asyncio.Event().wait()  # streams until stopped
        except asyncio.CancelledError:
            if not watch.stopping:
                raise
            asyncio.current_task().uncancel()
            return "stopped"
    return "ended"


async def test_a_stop_cancels_the_watched_reply_and_says_so() -> None:
    stops = ReplyStops()
    started = asyncio.Event()
    task = asyncio.create_task(_reply(stops, "t1", started))
    await started.wait()
    assert stops.stop("t1") is True
    assert stops.stop("t1") is True  # a second stop of the same reply changes nothing
    assert await task == "stopped"
    assert stops.stop("t1") is False  # it ended: nothing is watched any more


async def test_a_stop_of_a_reply_streamed_elsewhere_does_nothing_here() -> None:
    assert ReplyStops().stop("unknown") is False


async def test_another_cancel_is_not_a_stop() -> None:
    stops = ReplyStops()
    started = asyncio.Event()
    task = asyncio.create_task(_reply(stops, "t1", started))
    await started.wait()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    assert task.cancelled()
    assert stops.stop("t1") is False
