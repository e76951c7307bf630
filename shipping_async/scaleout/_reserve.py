"""Permits taken from Redis ahead of demand, so that an order gate can see one is ready.

The bulk pipeline's order gate writes a job's order intent only once the limiter reports
a permit :meth:`~RedisOrderLimiter.available`, so that a crash never leaves intents of
orders that were never sent. For a shared limiter "available" must mean "already taken
in Redis for this process": that is this reserve.

How big: the gate asks :meth:`~RedisOrderLimiter.next_free_at` only while a job waits at
it with every ready permit spoken for. Each such ask doubles the target (1, 2, 4, ... up
to the limit, like TCP's slow start), so a fresh window's permits are fetched in a few
round trips, not one per order. That may fetch more than the jobs waiting need, so
what nobody took goes back to Redis - after ``quiet`` seconds without an ask (the gate
is no longer waiting), else after ``idle`` - and the target shrinks with it: a worker
running out of jobs does not sit on permits other workers need. The oldest
``promised()`` permits never go back: a gate has let jobs through for them.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

from shipping_async.limiter import Permit

__all__ = ["Reserve"]


class Reserve:
    """The permits of one process that :meth:`take` hands out at once."""

    __slots__ = ("_asked_at", "_permits", "idle", "promised", "quiet", "target")

    def __init__(self, idle: float, quiet: float) -> None:
        self.idle = idle
        self.quiet = quiet
        self.target = 0
        #: How many ready permits are spoken for (jobs let through, about to take one).
        self.promised: Callable[[], int] = lambda: 0
        self._asked_at = -math.inf
        self._permits: deque[Permit] = deque()

    def __len__(self) -> int:
        return len(self._permits)

    def ask(self, now: float, limit: int) -> bool:
        """A caller waits for more ready permits; ``True`` if more should be fetched now."""
        self._asked_at = now
        if len(self._permits) < self.target:
            return False  # a fetch is already due
        grown = min(limit, max(1, 2 * self.target))
        if grown <= len(self._permits):
            return False
        self.target = grown
        return True

    def missing(self, now: float) -> int:
        """How many permits to fetch now: none once nobody has asked for ``quiet``."""
        if now - self._asked_at > self.quiet:
            return 0
        return max(0, self.target - len(self._permits))

    def offer(self, permit: Permit) -> bool:
        """Keep a freshly granted permit if the target wants one."""
        if len(self._permits) >= self.target:
            return False
        self._permits.append(permit)
        return True

    def take(self) -> Permit | None:
        """The oldest ready permit, or ``None``."""
        return self._permits.popleft() if self._permits else None

    def expire(self, now: float) -> list[Permit]:
        """Remove and return the unpromised permits nobody wants any more; shrink the
        target to what is left."""
        kept = max(0, self.promised())  # the oldest: take() hands them out first
        expired = []
        while len(self._permits) > kept and self._expiry(self._permits[kept]) <= now:
            expired.append(self._permits[kept])
            del self._permits[kept]
        if expired:
            self.target = len(self._permits)
        return expired

    def next_expiry(self) -> float | None:
        """When the oldest unpromised ready permit expires, if there is one."""
        kept = max(0, self.promised())
        if len(self._permits) <= kept:
            return None
        return self._expiry(self._permits[kept])

    def _expiry(self, permit: Permit) -> float:
        return min(
            permit.acquired_at + self.idle, max(permit.acquired_at, self._asked_at) + self.quiet
        )

    def clear(self) -> list[Permit]:
        """Remove and return every ready permit; fetch none until asked again."""
        permits = list(self._permits)
        self._permits.clear()
        self.target = 0
        return permits
