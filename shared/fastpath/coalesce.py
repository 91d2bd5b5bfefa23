"""``coalesce``: a model's deltas that arrive within a latency budget travel on as one.

Every delta a model streams costs the services one unit of work each: a seq and a durable write, an
SSE message, a frame, a fan-out message, a WebSocket write. A reader sees nothing better than a few
dozen updates a second, while a fast model streams hundreds to thousands of tokens a second: joining
what arrives within ``STREAM_COALESCE_MS`` makes a stream's cost follow the reader, not the model.

The rules, for a provider's event stream (``shared.llm.base``), whose delta types (text, reasoning:
``DELTA_TYPES`` there) the caller names:

- The first delta of each type (the first text delta, the first reasoning delta) passes at once: the
  first token's latency is unchanged.
- After that, a delta that arrives while none is held starts a chunk; the deltas of the same kind
  after it join it. The chunk goes out as one delta once ``budget`` has passed since its first delta
  (or later, when the reader asks later: whatever arrived meanwhile is in it), also while the model is
  silent: the budget is kept by a timer, not by the next delta.
- Anything else (a tool call, ``LLMDone``), a delta of the other kind, the end of the stream and its
  error flush the held chunk first, so order is kept; an error is raised after the held text is out.
- ``budget`` 0: the stream is returned as it is.

One task per stream (the pump) reads the source, so that the reader can wait with a deadline
without ever cancelling the source's ``__anext__`` (cancelling an async generator's step closes the
generator). Per delta the pump only appends its text; the reader wakes once per chunk. The pump
pauses when the reader falls ``HOLD_MAX_CHARS`` behind, so a stalled reader (a database away) stalls
the model's stream as before instead of growing memory.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any, Protocol, TypeVar

from shared.fastpath.fair_share import FairShare

__all__ = ["HOLD_MAX_CHARS", "MAX_BUDGET_MS", "aclose_stream", "coalesce", "read_window_s", "split_budget",
           "valid_budget_ms"]

# Held text past this is due at once, and the pump waits until the reader has taken it.
HOLD_MAX_CHARS = 16_384
# The largest budget the settings accept: past a second the stream no longer reads as streaming.
MAX_BUDGET_MS = 1000

E = TypeVar("E")


class Delta(Protocol):
    """A piece of streamed text (``shared.llm.base.TextDelta``, ``ReasoningDelta``): its type built
    from a text is the piece of that text."""

    text: str


DeltaType = Callable[[str], Any]


def valid_budget_ms(value: float) -> float:
    """The ``STREAM_COALESCE_MS`` setting, checked: 0 (off) up to ``MAX_BUDGET_MS``."""
    if not 0 <= value <= MAX_BUDGET_MS:
        raise ValueError(
            f"STREAM_COALESCE_MS is how long a delta may wait to be joined with the next, in ms: "
            f"0 (off, one event per delta) to {MAX_BUDGET_MS}, not {value:g}"
        )
    return value


def read_window_s(budget_ms: float) -> float:
    """How long a fast model's socket may be left unread (``AiohttpTransport``) under a coalescing
    budget: a fifth of it, at most 5 ms. A delta read that late still goes out within the budget
    plus the window, and one read then carries the deltas of the whole window. 0 when off."""
    return min(budget_ms / 5, 5.0) / 1000


def split_budget(budget_ms: float) -> tuple[float, float]:
    """``STREAM_COALESCE_MS`` is the most a delta waits in all: ``(hold_ms, read_window_s)``, the part
    a chunk holds it (``coalesce``) and the part it may wait unread in the socket before that."""
    window_s = read_window_s(budget_ms)
    return budget_ms - window_s * 1000, window_s


def coalesce(
    events: AsyncIterable[E], budget_ms: float, deltas: tuple[DeltaType, ...],
) -> AsyncIterator[E]:
    """``events`` with the ``deltas`` types' events joined within ``budget_ms`` (0: ``events``
    itself). The caller closes what it gets (``aclose_stream``), which closes ``events`` too."""
    if budget_ms <= 0:
        return events.__aiter__()
    if not deltas:
        raise ValueError("coalesce needs the delta types it joins")
    return _Coalesced(events.__aiter__(), budget_ms / 1000, deltas)  # type: ignore[return-value]


async def aclose_stream(events: AsyncIterator[Any]) -> None:
    """Close a stream ``coalesce`` returned (or any async iterator that can be closed)."""
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class _Coalesced:
    __slots__ = (
        "_budget", "_deadline", "_deltas", "_ended", "_error", "_firsts", "_held", "_held_chars", "_kind", "_loop",
        "_out", "_pump", "_room", "_source", "_timer", "_waiter",
    )

    def __init__(self, source: AsyncIterator[Any], budget_s: float, deltas: tuple[DeltaType, ...]) -> None:
        self._source = source
        self._deltas = frozenset(deltas)
        self._budget = budget_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pump: asyncio.Task[None] | None = None
        # Events due to the reader, in order; the held chunk always comes after them.
        self._out: deque[Any] = deque()
        self._held: list[str] = []
        self._held_chars = 0
        self._kind: DeltaType = deltas[0]
        self._deadline = 0.0  # loop time the held chunk is due at
        self._firsts = set(deltas)  # the types whose first delta is still to come
        self._ended = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None  # the reader's, while it waits
        self._timer: asyncio.TimerHandle | None = None  # wakes the waiting reader when the held chunk is due
        self._room: asyncio.Future[None] | None = None  # the pump's, while the reader is far behind

    def __aiter__(self) -> _Coalesced:
        return self

    async def __anext__(self) -> Any:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
            self._pump = loop.create_task(self._read(), name="coalesce")
        while True:
            if self._out:
                event = self._out.popleft()
                if not self._out and self._room is not None:
                    _wake(self._room)
                return event
            if self._held:
                if loop.time() >= self._deadline:
                    return self._release()
                await self._wait(loop, self._deadline)
            elif self._ended:
                error, self._error = self._error, None
                if error is not None:
                    raise error
                raise StopAsyncIteration
            else:
                await self._wait(loop, None)

    async def _wait(self, loop: asyncio.AbstractEventLoop, deadline: float | None) -> None:
        """Until the pump has something due, or ``deadline`` (loop time) passes."""
        waiter = self._waiter = loop.create_future()
        if deadline is not None:
            self._timer = loop.call_at(deadline, _wake, waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _release(self) -> Delta:
        held = self._held
        text = held[0] if len(held) == 1 else "".join(held)
        self._held = []
        self._held_chars = 0
        return self._kind(text)

    def _flush(self) -> None:
        if self._held:
            self._out.append(self._release())

    def _due(self) -> None:
        if self._waiter is not None:
            _wake(self._waiter)

    async def _read(self) -> None:
        """The pump: reads the source to its end, joining deltas into the held chunk."""
        source = self._source
        share = FairShare()
        out = self._out
        try:
            while True:
                # A burst of deltas from one network read comes without a wait: let the loop go round.
                await share.checkpoint()
                event = await source.__anext__()
                kind = type(event)
                if kind in self._deltas:
                    text = event.text
                    if not text:
                        continue
                    if kind in self._firsts:
                        self._firsts.discard(kind)
                        self._flush()
                        out.append(event)
                        self._due()
                        continue
                    if self._held and self._kind is not kind:
                        self._flush()
                        self._due()
                    if not self._held:
                        self._start(kind)
                    self._held.append(text)
                    self._held_chars += len(text)
                    if self._held_chars >= HOLD_MAX_CHARS:
                        self._flush()
                        self._due()
                        await self._drained()
                else:
                    self._flush()
                    out.append(event)
                    self._due()
        except StopAsyncIteration:
            pass
        except asyncio.CancelledError:
            # By ``aclose``; otherwise (a loop shutting down) the reader must not take it for the end.
            self._error = asyncio.CancelledError()
            raise
        except BaseException as exc:  # noqa: BLE001 - not swallowed: the reader raises it, after the held text
            self._error = exc
        finally:
            self._flush()
            self._ended = True
            self._due()

    def _start(self, kind: DeltaType) -> None:
        """A new chunk: due ``budget`` from now. A reader already waiting (with nothing held, so with
        no deadline) is woken then, while the model may say nothing more."""
        loop = self._loop
        assert loop is not None
        self._kind = kind
        self._deadline = loop.time() + self._budget
        if self._waiter is not None and self._timer is None:
            self._timer = loop.call_at(self._deadline, _wake, self._waiter)

    async def _drained(self) -> None:
        if self._out:
            room = self._room = self._loop.create_future()  # type: ignore[union-attr]
            try:
                await room
            finally:
                self._room = None

    async def aclose(self) -> None:
        """Stop the pump (it may be waiting for the model) and close the source."""
        pump, self._pump = self._pump, None
        if pump is not None and not pump.done():
            pump.cancel()
            # Its end, whatever it was (a wait does not raise the pump's cancellation as the caller's).
            await asyncio.wait((pump,))
        await aclose_stream(self._source)
