"""``ReplyStops``: the replies this process streams itself (direct LLM replies), so that a stop
request can end them at once.

A direct reply's stream is a task of this process: nothing outside it can end it. The reply
registers its task while it streams (``watch``); a stop cancels that task after marking it as
stopping, so the reply tells the user's stop (end the message ``stopped``, text so far kept)
from a shutdown's cancel (leave the turn for a takeover). A stop sent to another replica reaches
this one through the turn's row: the lease renewal reads the flag (``TurnLeases.renew``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(slots=True)
class StopWatch:
    task: asyncio.Task
    stopping: bool = False


class ReplyStops:
    def __init__(self) -> None:
        self._watched: dict[str, StopWatch] = {}

    @contextmanager
    def watch(self, turn_id: str) -> Iterator[StopWatch]:
        """While the block runs, a stop of ``turn_id`` cancels the current task; the block's
        handler of ``CancelledError`` reads ``stopping`` to know it was a stop."""
        task = asyncio.current_task()
        assert task is not None, "a reply streams in a task"
        watch = self._watched[turn_id] = StopWatch(task)
        try:
            yield watch
        finally:
            if self._watched.get(turn_id) is watch:
                del self._watched[turn_id]

    def stop(self, turn_id: str) -> bool:
        """Stop the reply of ``turn_id`` if this process streams it; whether it did."""
        watch = self._watched.get(turn_id)
        if watch is None or watch.task.done():
            return False
        if not watch.stopping:
            watch.stopping = True
            watch.task.cancel("stopped by the user")
        return True
