"""Redis connections of both services, made to outlive a Redis restart.

Redis only accelerates here (frame seqs and fan-out across chat replicas, shared rate-limit counts):
every user of it has a way on without it (DESIGN §8). What that needs from the connection:

- ``connect(url)``: pooled connections that are checked before reuse when idle
  (``health_check_interval``) and a command that meets a connection a restart closed is sent once
  more on a new one, so a restart costs no request; connect and read timeouts are short, so a Redis
  that is away answers with an error in bounded time instead of holding a caller. ``for_pubsub``:
  no read timeout (a subscription waits for messages as long as there are none).
- ``REDIS_UNAVAILABLE``: the errors that say Redis is away, not that a command was wrong.
- ``Absence``: remembers that Redis failed, so that while it is away a caller goes straight to its
  way without it (retrying now and then) instead of paying a refused connect per call, and says so
  in the log once per outage.
"""

from __future__ import annotations

import logging
import time

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["REDIS_UNAVAILABLE", "Absence", "connect"]

log = logging.getLogger(__name__)

REDIS_UNAVAILABLE = (RedisConnectionError, RedisTimeoutError, ConnectionError, OSError, TimeoutError)
CONNECT_TIMEOUT_S = 1.0
COMMAND_TIMEOUT_S = 2.0
HEALTH_CHECK_S = 5


def connect(url: str, *, for_pubsub: bool = False) -> Redis:
    return Redis.from_url(
        url, socket_connect_timeout=CONNECT_TIMEOUT_S, socket_timeout=None if for_pubsub else COMMAND_TIMEOUT_S,
        health_check_interval=HEALTH_CHECK_S, retry=Retry(NoBackoff(), 1),
        retry_on_error=[RedisConnectionError, RedisTimeoutError],
    )


class Absence:
    """Whether to skip Redis now: after a failure, for ``pause_s`` (doubling up to ``max_pause_s``
    while it stays away); one warning when it goes, one line when it is back."""

    def __init__(self, what: str, *, pause_s: float = 0.25, max_pause_s: float = 2.0) -> None:
        self._what = what
        self._pause_s, self._max_pause_s = pause_s, max_pause_s
        self._pause = pause_s
        self._until = 0.0
        self.away = False

    def skip(self) -> bool:
        return self.away and time.monotonic() < self._until

    def failed(self, exc: BaseException) -> None:
        if not self.away:
            log.warning("Redis unavailable; carrying on without it", extra={
                "what": self._what, "error_type": type(exc).__name__})
            self._pause = self._pause_s
        else:
            self._pause = min(self._pause * 2, self._max_pause_s)
        self.away = True
        self._until = time.monotonic() + self._pause

    def succeeded(self) -> None:
        if self.away:
            log.info("Redis is back", extra={"what": self._what})
        self.away = False
