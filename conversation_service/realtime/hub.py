"""Fan-out of frames to the WebSocket clients of a conversation: the ``Hub`` interface.

``InProcessHub`` serves one replica. ``RedisHub`` serves several: a frame goes to the publishing
replica's own subscribers at once, in ``publish``, and to the other replicas through one Redis
pub/sub channel, each routing what it receives to its local subscribers by conversation id.
One channel (rather than one per conversation) keeps a single long-lived subscription per process:
no SUBSCRIBE/UNSUBSCRIBE churn racing the reader as clients come and go; a replica reads the
conversation id ahead of the frame and decodes only frames it has a client for.

``publish()`` never waits on a subscriber, nor on Redis: delivery is ``Subscriber.deliver``, which
must not block (a client connection writes the frame at once when its socket has room, else
queues it, bounded, and flags itself when full); frames for other replicas queue in an outbox that
one task sends, whatever has queued in one pipelined write.

Redis only accelerates: while a replica's subscription is down it refills its clients from the
database every ``poll_s`` (each client reads the stored frames after the last it was sent), and once
more when the subscription is back; the outbox keeps what it could not send and sends it when Redis
is back (a frame a client got from the database meanwhile is not sent twice: clients skip seqs they
have). Frames the outbox had to drop (full) are announced once Redis is back, so that the other
replicas refill those conversations' clients from the database.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable
from typing import Protocol, runtime_checkable

from conversation_service.realtime.frames import Frame
from shared.redis_client import connect

log = logging.getLogger(__name__)


class Subscriber(Protocol):
    def deliver(self, frame: Frame) -> None:
        """Take a frame without blocking; never raises for a full queue (flag, then drop)."""
        ...


@runtime_checkable
class Refillable(Protocol):
    def refill(self) -> None:
        """Catch up from the database, without blocking (frames may have been missed: Redis away)."""
        ...


Unsubscribe = Callable[[], None]


class _LocalRegistry:
    def __init__(self) -> None:
        self._subscribers: dict[str, set[Subscriber]] = {}

    def add(self, conversation_id: str, subscriber: Subscriber) -> Unsubscribe:
        self._subscribers.setdefault(conversation_id, set()).add(subscriber)

        def remove() -> None:
            subs = self._subscribers.get(conversation_id)
            if subs is not None:
                subs.discard(subscriber)
                if not subs:
                    del self._subscribers[conversation_id]

        return remove

    def deliver(self, frame: Frame) -> None:
        for subscriber in tuple(self._subscribers.get(frame.conversation_id, ())):
            try:
                subscriber.deliver(frame)
            except Exception:  # one broken subscriber must not starve the others
                log.exception("subscriber failed to take a frame", extra={"frame_seq": frame.seq})

    def count(self, conversation_id: str) -> int:
        return len(self._subscribers.get(conversation_id, ()))

    def refill(self, conversation_ids: Iterable[str] | None = None) -> None:
        """Ask the subscribers of these conversations (default: all) to catch up from the database."""
        ids = tuple(self._subscribers) if conversation_ids is None else tuple(conversation_ids)
        for conversation_id in ids:
            for subscriber in tuple(self._subscribers.get(conversation_id, ())):
                if isinstance(subscriber, Refillable):
                    subscriber.refill()


class Hub(ABC):
    def __init__(self) -> None:
        self._local = _LocalRegistry()

    async def start(self) -> None:
        """Connect whatever the hub needs; called once from the app lifespan."""

    async def close(self) -> None:
        """Release connections and tasks."""

    @abstractmethod
    async def publish(self, frame: Frame) -> None:
        """Deliver ``frame`` to every subscriber of its conversation, on every replica."""

    def subscribe(self, conversation_id: str, subscriber: Subscriber) -> Unsubscribe:
        """Register a local subscriber; frames published after this returns reach it."""
        return self._local.add(conversation_id, subscriber)

    def subscriber_count(self, conversation_id: str) -> int:
        return self._local.count(conversation_id)


class InProcessHub(Hub):
    async def publish(self, frame: Frame) -> None:
        self._local.deliver(frame)


# A message on the channel: the sending replica's id, the conversation id, then the frame's JSON,
# separated by newlines (neither id holds one; the frame's JSON never does, as JSON escapes it).
_SEP = b"\n"
# The pauses between tries at a batch the outbox could not send; the last repeats while Redis is away.
_SEND_RETRY_S = (0.1, 0.3, 1.0, 2.0)
# How long a closing hub goes on sending what its outbox holds.
_CLOSE_S = 2.0
# How often clients are refilled from the database while the subscription is down.
_POLL_S = 0.5
# How long a starting hub waits for its subscription before it starts polling instead.
_SUBSCRIBE_WAIT_S = 5.0


class RedisHub(Hub):
    def __init__(
        self, redis_url: str, channel: str, *, outbox_size: int = 20_000, batch: int = 500,
        retry_pauses: tuple[float, ...] = _SEND_RETRY_S, dropped: Callable[[int], None] | None = None,
        poll_s: float = _POLL_S,
    ) -> None:
        super().__init__()
        self._redis_url = redis_url
        self.channel = channel
        # Frames this replica sent come back on the channel; its own subscribers had them already.
        self.origin = uuid.uuid4().hex.encode()
        self._outbox: deque[bytes] = deque()
        self._outbox_size = outbox_size
        self._batch = batch
        self._retry_pauses = retry_pauses
        self._dropped = dropped or (lambda n: None)
        self._poll_s = poll_s
        # Conversations whose frames the outbox dropped: announced for a refill once Redis is back.
        self._dropped_in: set[str] = set()
        self._ready = asyncio.Event()
        self._closing = False
        self._redis = None
        self._reader: asyncio.Task | None = None
        self._sender: asyncio.Task | None = None
        self._subscribed = asyncio.Event()

    async def start(self) -> None:
        self._redis = connect(self._redis_url, for_pubsub=True)
        self._reader = asyncio.create_task(self._read_forever(), name="redis-hub-reader")
        self._sender = asyncio.create_task(self._send_forever(), name="redis-hub-sender")
        # A frame published before our SUBSCRIBE is registered would be lost: wait for the ack. Redis
        # away at start-up is no reason not to serve: the clients are refilled from the database.
        try:
            await asyncio.wait_for(asyncio.shield(self._subscribed.wait()), timeout=_SUBSCRIBE_WAIT_S)
        except TimeoutError:
            log.warning("hub started without its Redis subscription; clients are refilled from the database")

    async def close(self) -> None:
        """Send what is still in the outbox (for up to ``_CLOSE_S``), then stop."""
        self._closing = True
        self._ready.set()
        tasks = [task for task in (self._sender, self._reader) if task is not None]
        if self._sender is not None:
            await asyncio.wait([self._sender], timeout=_CLOSE_S)
        for task in tasks:
            task.cancel()
        # Not gather: redis-py may take a cancellation inside a command for a lost connection and
        # carry on; a shutdown must not hang on that.
        if tasks:
            await asyncio.wait(tasks, timeout=1)
        if self._redis is not None:
            await self._redis.aclose()

    async def publish(self, frame: Frame) -> None:
        assert self._redis is not None, "RedisHub.start() was not called"
        self._local.deliver(frame)
        if len(self._outbox) >= self._outbox_size:
            # Redis far behind or gone: the other replicas' clients refill from the database.
            self._dropped(1)
            self._dropped_in.add(frame.conversation_id)
            return
        self._outbox.append(self.origin + _SEP + frame.conversation_id.encode() + _SEP + frame.to_json())
        self._ready.set()

    def _take(self) -> list[bytes]:
        return [self._outbox.popleft() for _ in range(min(len(self._outbox), self._batch))]

    async def _send(self, messages: list[bytes]) -> None:
        async with self._redis.pipeline(transaction=False) as pipe:
            for message in messages:
                pipe.publish(self.channel, message)
            await pipe.execute()

    async def _send_forever(self) -> None:
        while not self._closing:
            await self._ready.wait()
            self._ready.clear()
            while self._outbox:
                messages = self._take()
                await self._send_until_sent(messages)
                if self._dropped_in and not self._closing:
                    await self._announce_dropped()

    async def _send_until_sent(self, messages: list[bytes]) -> None:
        """Send a batch, again while Redis is away (it stays bounded: ``publish`` drops past the
        outbox's size); given up only when the hub closes."""
        for attempt in itertools.count():
            try:
                await self._send(messages)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - Redis away: tried again below
                if self._closing:
                    log.warning("closing with frames Redis did not take", extra={"frames": len(messages)})
                    self._dropped(len(messages))
                    return
                pause = self._retry_pauses[min(attempt, len(self._retry_pauses) - 1)]
                if attempt == 0:
                    log.warning("sending frames to the other replicas failed; retrying while Redis is away",
                                extra={"frames": len(messages), "error_type": type(exc).__name__})
                await asyncio.sleep(pause)

    async def _announce_dropped(self) -> None:
        """Tell the other replicas which conversations lost frames here: they refill their clients."""
        dropped, self._dropped_in = self._dropped_in, set()
        await self._send_until_sent([self.origin + _SEP + cid.encode() + _SEP for cid in dropped])

    def _receive(self, raw: bytes) -> None:
        if raw.startswith(b"{"):
            # A replica of an earlier release sends the bare frame (during a rolling upgrade).
            origin, conversation_id, body = b"", None, raw
        else:
            origin, conversation_id_raw, body = raw.split(_SEP, 2)
            conversation_id = conversation_id_raw.decode()
        if origin == self.origin or (conversation_id is not None and not self._local.count(conversation_id)):
            return
        if not body and conversation_id is not None:
            self._local.refill([conversation_id])  # frames of it were dropped on their way here
            return
        frame = Frame.from_json(body)
        if conversation_id is not None and frame.conversation_id != conversation_id:
            raise ValueError("the frame's conversation is not the one its message names")
        self._local.deliver(frame)

    async def _read_forever(self) -> None:
        backoff = 0.1
        poller: asyncio.Task | None = asyncio.create_task(self._poll(), name="redis-hub-poll")
        while True:
            pubsub = self._redis.pubsub()
            try:
                await pubsub.subscribe(self.channel)
                while True:
                    message = await pubsub.get_message(timeout=None)
                    if message is None:
                        continue
                    if message["type"] == "subscribe":
                        self._subscribed.set()
                        backoff = 0.1
                        await _stopped(poller)
                        poller = None
                        # What was published while the subscription was down: from the database.
                        self._local.refill()
                        continue
                    if message["type"] != "message":
                        continue
                    try:
                        self._receive(message["data"])
                    except (ValueError, KeyError, TypeError):
                        log.warning("dropped an undecodable frame from the hub channel")
            except asyncio.CancelledError:
                await _stopped(poller)
                raise
            except Exception as exc:  # noqa: BLE001 - the subscription is lost: made again below
                # Frames published meanwhile reach this replica's clients from the database.
                self._subscribed.clear()
                if poller is None:
                    log.warning("hub subscription to Redis lost; clients are refilled from the database until "
                                "it is back", extra={"retry_in_s": backoff, "error_type": type(exc).__name__})
                    poller = asyncio.create_task(self._poll(), name="redis-hub-poll")
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
            finally:
                try:
                    await pubsub.aclose()
                except Exception:  # noqa: BLE001, S110 - the connection may already be gone
                    pass

    async def _poll(self) -> None:
        """While the subscription is down: every client catches up from the database now and then."""
        while True:
            await asyncio.sleep(self._poll_s)
            self._local.refill()


async def _stopped(task: asyncio.Task | None) -> None:
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
