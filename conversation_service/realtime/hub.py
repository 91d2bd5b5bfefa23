"""Fan-out of frames to the WebSocket clients of a conversation: the ``Hub`` interface.

``InProcessHub`` serves one replica. ``RedisHub`` serves several: every replica publishes to one
Redis pub/sub channel and routes what it receives to its local subscribers by conversation id.
One channel (rather than one per conversation) keeps a single long-lived subscription per process:
no SUBSCRIBE/UNSUBSCRIBE churn racing the reader as clients come and go, at the cost of each
replica decoding frames of conversations it has no client for.

``publish()`` never waits on a subscriber: delivery is ``Subscriber.deliver``, which must not
block (a client connection writes the frame at once when its socket has room, else queues it,
bounded, and flags itself when full).
A frame lost between replicas (Redis hiccup) shows up as a seq gap at the client, which refills
it from the database.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Protocol

from conversation_service.realtime.frames import Frame

log = logging.getLogger(__name__)


class Subscriber(Protocol):
    def deliver(self, frame: Frame) -> None:
        """Take a frame without blocking; never raises for a full queue (flag, then drop)."""
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


class RedisHub(Hub):
    def __init__(self, redis_url: str, channel: str) -> None:
        super().__init__()
        self._redis_url = redis_url
        self.channel = channel
        self._redis = None
        self._reader: asyncio.Task | None = None
        self._subscribed = asyncio.Event()

    async def start(self) -> None:
        import redis.asyncio as aioredis

        self._redis = aioredis.from_url(self._redis_url)
        self._reader = asyncio.create_task(self._read_forever(), name="redis-hub-reader")
        # A frame published before our SUBSCRIBE is registered would be lost: wait for the ack.
        await asyncio.wait_for(self._subscribed.wait(), timeout=10)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        if self._redis is not None:
            await self._redis.aclose()

    async def publish(self, frame: Frame) -> None:
        assert self._redis is not None, "RedisHub.start() was not called"
        await self._redis.publish(self.channel, frame.to_json())

    async def _read_forever(self) -> None:
        backoff = 0.1
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
                        continue
                    if message["type"] != "message":
                        continue
                    try:
                        frame = Frame.from_json(message["data"])
                    except (ValueError, KeyError, TypeError):
                        log.warning("dropped an undecodable frame from the hub channel")
                        continue
                    self._local.deliver(frame)
            except asyncio.CancelledError:
                raise
            except Exception:
                # Frames published meanwhile are refilled from the database by the clients' gap check.
                log.exception("hub subscription to Redis lost; reconnecting", extra={"retry_in_s": backoff})
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
            finally:
                try:
                    await pubsub.aclose()
                except Exception:  # noqa: BLE001, S110 - the connection may already be gone
                    pass
