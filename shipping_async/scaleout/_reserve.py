"""Permits of one process taken in Redis for the jobs an order gate is about to admit.

The bulk pipeline's order gate writes a job's order intent only once the limiter reports
a permit :meth:`~RedisOrderLimiter.available`, so that a crash never leaves intents of
orders that were never sent. For a shared limiter "available" must mean "already taken
in Redis for this process": that is this reserve.

How big: exactly what the gate's jobs want now (``wanted()``: one per job waiting to be
admitted and per job admitted that has not taken its permit yet), never more than the
limit. A permit fetched ahead is thus taken for a job that exists now; when that job goes
away (its quote failed, the run stops, the journal's store is away), the permit is
surplus and goes back at once - an idle worker sits on none. (After ``grace`` seconds of
being surplus: a job that stops waiting at the gate to send its order takes its permit a
moment later.) A permit waits at most
``ahead`` seconds here (it was fetched to count for ``lease + ahead``): an older one goes
back, and its job acquires anew.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

from shipping_async.limiter import Permit

__all__ = ["Reserve"]


class Reserve:
    """The permits of one process that :meth:`take` hands out at once."""

    __slots__ = ("_excess_since", "_permits", "ahead", "grace", "wanted")

    def __init__(self, ahead: float, grace: float) -> None:
        self.ahead = ahead
        self.grace = grace
        self._excess_since: float | None = None  # more permits than wanted since then
        #: How many permits the attached gate's jobs want now (none without a gate).
        self.wanted: Callable[[], int] = lambda: 0
        self._permits: deque[Permit] = deque()

    def __len__(self) -> int:
        return len(self._permits)

    def missing(self, limit: int) -> int:
        """How many permits to fetch ahead now."""
        return max(0, min(limit, self.wanted()) - len(self._permits))

    def add(self, permit: Permit) -> None:
        """Keep a permit fetched ahead (``acquired_at``: when Redis granted it)."""
        self._permits.append(permit)

    def take(self, now: float) -> tuple[Permit | None, list[Permit]]:
        """The oldest fresh permit (or ``None``), and the stale ones to give back."""
        stale: list[Permit] = []
        while self._permits:
            permit = self._permits.popleft()
            if now - permit.acquired_at <= self.ahead:
                return permit, stale
            stale.append(permit)
        return None, stale

    def surplus(self, now: float, limit: int) -> list[Permit]:
        """Remove and return the stale permits, and those nobody has wanted for ``grace``."""
        permits: deque[Permit] = self._permits
        gone: list[Permit] = []
        # Granted in order, so the oldest (the first to go stale) are on the left.
        while permits and now - permits[0].acquired_at > self.ahead:
            gone.append(permits.popleft())
        wanted = max(0, min(limit, self.wanted()))
        if len(permits) <= wanted:
            self._excess_since = None
        elif self._excess_since is None:
            self._excess_since = now
        elif now - self._excess_since >= self.grace:
            while len(permits) > wanted:
                gone.append(permits.pop())  # the newest: the oldest are handed out first
            self._excess_since = None
        return gone

    def wake_at(self) -> float:
        """When :meth:`surplus` may have something to return (``inf``: never by itself)."""
        at = self._permits[0].acquired_at + self.ahead if self._permits else math.inf
        if self._excess_since is not None:
            at = min(at, self._excess_since + self.grace)
        return at

    def clear(self) -> list[Permit]:
        """Remove and return every permit."""
        permits = list(self._permits)
        self._permits.clear()
        return permits
