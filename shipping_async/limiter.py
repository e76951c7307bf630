"""The order limiter: permits for POST /orders, held long enough that no window overflows.

The API takes 20 POST /orders per 60 s and answers 429 beyond that, with a text such as
``20 of 20 in 60 seconds`` (spec sections 7 and 8). :class:`OrderLimiter` is what the
client needs; :class:`RollingWindowLimiter` implements it in process. Every task using a
client shares its limiter; pass one instance to several clients to share it between them.

How it works: a permit is taken *before* the request is sent and stays counted until the
response (or the client's timeout) plus ``window + margin``. The request reached the
server somewhere inside that span, so it has left every server window - a sliding one, or
fixed windows at any offset - by the time its permit frees: never more than ``limit``
arrivals within any ``window`` seconds, whatever the latency. A request that certainly
never left (``sent=False``) frees its permit at once.

Why not ``aiolimiter.AsyncLimiter(20, 60)``: it is a leaky bucket, a burst of 20 and then
one more every 3 s, so 39 acquisitions can start within one 60 s span and a sliding-window
server refuses 19 of them. ``AsyncLimiter(1, 3)`` never overflows but needs 57 s for 20
orders that could all go at once. Neither knows when a request really reached the server.
``benchmarks/limiter_vs_aiolimiter.py`` measures the three side by side.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
from collections import deque
from collections.abc import Iterable
from typing import Protocol, runtime_checkable
from uuid import uuid4

import msgspec

from shipping_async.clock import Clock, SystemClock

__all__ = [
    "DEFAULT_MARGIN_SHARE",
    "OrderLimiter",
    "Permit",
    "RemembersSent",
    "RollingWindowLimiter",
    "check_rate",
]

_log = logging.getLogger(__name__)

# The default margin as a share of the window: 1.2 s on the API's 60 s, 12 ms on a 0.6 s
# test window. It keeps the (k + limit)-th arrival strictly more than a window after the
# k-th (a server counting closed spans [t - 60, t] refuses "exactly 60 s later"), covers a
# server that stamps arrivals to the whole second (needs > 1 s at 60 s), clock-rate drift
# between hosts, and a request released at a client timeout that still sat in a proxy
# queue for a moment. It costs 2 % of a long batch's time.
#: The default margin, as a share of the window, that a permit is held past it.
DEFAULT_MARGIN_SHARE = 0.02


# Permit ids are unique in the process (a permit given back to another limiter is still
# refused) without a uuid4, a system call for randomness, per order.
_PERMIT_PREFIX = f"{uuid4().hex[:12]}-"
_permit_numbers = itertools.count()


class Permit(msgspec.Struct, frozen=True):
    """The right to send one order creation. Give it back with :meth:`OrderLimiter.release`."""

    id: str
    acquired_at: float


@runtime_checkable
class OrderLimiter(Protocol):
    """What the client needs from a limiter; an in-process and a Redis one implement it.

    The rules every implementation keeps:

    - ``acquire`` waits (first come, first served; ``front=True`` jumps the queue, used to
      re-send an order that got a 429) and returns a permit. Cancelled while waiting, it
      takes no permit.
    - ``release(permit, sent=True)``: the request reached the server (answered or timed
      out): the permit stays counted until ``now + window + margin``.
      ``release(permit, sent=False)``: it certainly never reached the server; the permit
      is free at once.
    - ``pause(seconds, limit=..., window=...)``: after a 429, nobody acquires for
      ``seconds`` (+ margin); a stricter ``limit``/``window`` learned from the 429 text is
      adopted for good.
    - ``next_free_at()``: when (on the clock's ``monotonic()``) the next permit should be
      granted, ``None`` when unknown; ``queued()``: how many acquirers wait (here) now,
      the place a new ``acquire`` takes. Both answer at once, without waiting: a web
      handler reads them to tell its caller the wait up front.
    """

    @property
    def limit(self) -> int: ...

    @property
    def window(self) -> float: ...

    def next_free_at(self) -> float | None: ...

    def queued(self) -> int: ...

    async def acquire(self, *, front: bool = False) -> Permit: ...

    async def release(self, permit: Permit, *, sent: bool) -> None: ...

    async def pause(
        self, seconds: float, *, limit: int | None = None, window: float | None = None
    ) -> None: ...


@runtime_checkable
class RemembersSent(Protocol):
    """A limiter that can be told about orders sent before it existed (by a previous run).

    An in-process limiter starts empty; a run that resumes a journal tells it when the
    journal's recent order intents were recorded, so that the first wave of the new
    process cannot land in the server's still-full window. A limiter whose permits
    outlive the process (the Redis one) needs no such telling and does not implement it.
    """

    def remember_sent(self, ages: Iterable[float]) -> None:
        """Count one request per item that reached the server ``age`` seconds ago (this
        limiter's clock): it holds a permit until ``now - age + window + margin``."""
        ...


class RollingWindowLimiter:
    """At most ``limit`` order creations reach the server within any ``window`` seconds.

    Example::

        limiter = RollingWindowLimiter()  # the API's 20 per 60 s
        permit = await limiter.acquire()
        try:
            response = await send_order()
        finally:
            await limiter.release(permit, sent=True)

    With many orders waiting, the first ``limit`` go at once and each next ``limit`` one
    window (plus round trip and margin) later, in arrival order. ``margin`` defaults to
    2 % of the window and then follows it when a 429 teaches a longer one.
    """

    __slots__ = (
        "_clock",
        "_cooling",
        "_held",
        "_limit",
        "_margin",
        "_paused_until",
        "_waiters",
        "_waker",
        "_waker_at",
        "_window",
    )

    def __init__(
        self,
        limit: int = 20,
        window: float = 60.0,
        *,
        margin: float | None = None,
        clock: Clock | None = None,
    ) -> None:
        check_rate(limit, window)
        if margin is not None and not 0 <= margin < math.inf:
            raise ValueError(f"margin: must be a finite number >= 0, got {margin!r}")
        self._limit = limit
        self._window = float(window)
        self._margin = margin  # None: a share of the window, so it scales with it
        self._clock: Clock = clock or SystemClock()
        # Ids of permits granted and not released: their request may be on the wire.
        self._held: set[str] = set()
        # Release times of sent requests, oldest first (clocks never go back). Each stays
        # counted until release + window + margin; keeping the release time rather than
        # the expiry lets a longer window learned from a 429 cover past requests too.
        self._cooling: deque[float] = deque()
        self._paused_until = -math.inf
        # Waiting acquirers, served from the left; a permit is handed to the future
        # directly, so nobody arriving later can take it before the waiter resumes.
        self._waiters: deque[asyncio.Future[Permit]] = deque()
        # The one task sleeping on the clock until the next permit frees (aiolimiter keeps
        # a loop.call_at handle; a Clock only offers sleep()). It exists only while
        # somebody waits, and is replaced whenever that moment changes.
        self._waker: asyncio.Task[None] | None = None
        self._waker_at = math.inf

    @property
    def limit(self) -> int:
        """Order creations allowed per window (only ever lowered, by :meth:`pause`)."""
        return self._limit

    @property
    def window(self) -> float:
        """The window in seconds (only ever lengthened, by :meth:`pause`)."""
        return self._window

    @property
    def margin(self) -> float:
        """Seconds added to every hold and pause, on top of the window."""
        return self._window * DEFAULT_MARGIN_SHARE if self._margin is None else self._margin

    def available(self) -> int:
        """How many permits :meth:`acquire` would grant right now (0 while paused)."""
        return self._free(self._clock.monotonic())

    def next_free_at(self) -> float | None:
        """When (on ``clock.monotonic()``) the next permit can be granted, for an ETA.

        Now if one is free; ``None`` when every permit is held by a request still in
        flight, which frees only on its release.
        """
        return self._next_free_at(self._clock.monotonic())

    def queued(self) -> int:
        """How many acquirers are waiting: a new :meth:`acquire` queues behind them."""
        return sum(not waiter.done() for waiter in self._waiters)

    async def acquire(self, *, front: bool = False) -> Permit:
        """Wait for a permit, first come first served; ``front=True`` goes to the head."""
        now = self._clock.monotonic()
        if not self._waiters and self._free(now) > 0:
            return self._grant(now)
        waiter: asyncio.Future[Permit] = asyncio.get_running_loop().create_future()
        if front:
            self._waiters.appendleft(waiter)
        else:
            self._waiters.append(waiter)
        self._wake(now)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                # Granted in the same loop iteration as the cancellation: give it back.
                self._held.discard(waiter.result().id)
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            self._wake()
            raise

    async def release(self, permit: Permit, *, sent: bool) -> None:
        """Give a permit back: ``sent=True`` if the request may have reached the server."""
        try:
            self._held.remove(permit.id)
        except KeyError:
            raise ValueError(
                f"permit {permit.id} is not held by {self!r}: released twice, or "
                "acquired from another limiter"
            ) from None
        now = self._clock.monotonic()
        if sent:
            self._cooling.append(now)
        self._wake(now)

    def remember_sent(self, ages: Iterable[float]) -> None:
        """Count requests sent before this limiter existed, e.g. by a process that died.

        Each ``age`` (seconds ago, on this limiter's clock) holds a permit until
        ``now - age + window + margin``, exactly as if it had been released then with
        ``sent=True``. A negative age holds the permit that much longer (a request that
        may reach the server a little later); ages older than ``window + margin`` hold
        nothing.
        """
        now = self._clock.monotonic()
        sent = [now - float(age) for age in ages]
        if not all(math.isfinite(at) for at in sent):
            raise ValueError("ages: must be finite numbers of seconds")
        self._cooling = deque(sorted([*self._cooling, *sent]))
        self._wake(now)

    async def pause(
        self, seconds: float, *, limit: int | None = None, window: float | None = None
    ) -> None:
        """After a 429: grant nothing for ``seconds`` + margin; adopt a stricter rate."""
        if not 0 <= seconds < math.inf:
            raise ValueError(f"seconds: must be a finite number >= 0, got {seconds!r}")
        limit = self._limit if limit is None else limit
        window = self._window if window is None else float(window)
        check_rate(limit, window)
        if limit < self._limit or window > self._window:
            self._limit = min(self._limit, limit)
            self._window = max(self._window, window)
            _log.warning("the server's order limit is stricter than ours; now %r", self)
        now = self._clock.monotonic()
        self._paused_until = max(self._paused_until, now + seconds + self.margin)
        self._wake(now)

    def _free(self, now: float) -> int:
        self._forget_cooled(now)
        if now < self._paused_until:
            return 0
        return max(0, self._limit - len(self._held) - len(self._cooling))

    def _cooled_at(self, released: float) -> float:
        # The sum (with _forget_cooled's, made the same way): the timer wakes at exactly
        # this float, and _forget_cooled must then agree that the permit has cooled.
        return released + (self._window + self.margin)

    def _forget_cooled(self, now: float) -> None:
        cooling = self._cooling
        if cooling:
            hold = self._window + self.margin  # _cooled_at's sum, made once per call
            while cooling and cooling[0] + hold <= now:
                cooling.popleft()

    def _next_free_at(self, now: float) -> float | None:
        self._forget_cooled(now)
        # Index of the cooling permit whose expiry brings the count below the limit.
        index = len(self._held) + len(self._cooling) - self._limit
        if index < 0:
            at = now
        elif index < len(self._cooling):
            at = self._cooled_at(self._cooling[index])
        else:
            return None
        return max(at, self._paused_until)

    def _grant(self, now: float) -> Permit:
        permit = Permit(id=f"{_PERMIT_PREFIX}{next(_permit_numbers)}", acquired_at=now)
        self._held.add(permit.id)
        return permit

    def _wake(self, now: float | None = None) -> None:
        """Hand free permits to the head of the queue, then time the next hand-out."""
        if not self._waiters and self._waker is None:
            return  # nobody to hand a permit to, no timer to move (every order's release)
        if now is None:
            now = self._clock.monotonic()
        waiters = self._waiters
        while waiters:
            if waiters[0].done():  # cancelled; its task has not run its cleanup yet
                waiters.popleft()
            elif self._free(now) > 0:
                waiters.popleft().set_result(self._grant(now))
            else:
                break
        at = self._next_free_at(now) if waiters else None
        if at == self._waker_at:
            return
        if self._waker is not None:
            self._waker.cancel()
        self._waker, self._waker_at = None, math.inf
        if at is not None:
            self._waker_at = at
            self._waker = asyncio.get_running_loop().create_task(self._wake_at(at))

    async def _wake_at(self, at: float) -> None:
        await self._clock.sleep(at - self._clock.monotonic())
        self._waker, self._waker_at = None, math.inf  # done: _wake must not cancel it
        # A clock's sleep may end a hair before ``at`` (float rounding, timer resolution);
        # trust it rather than go back to sleep for a nanosecond.
        self._wake(max(at, self._clock.monotonic()))

    def __repr__(self) -> str:
        return (
            f"RollingWindowLimiter(limit={self._limit}, window={self._window:g}, "
            f"margin={self.margin:g})"
        )


def check_rate(limit: int, window: float) -> None:
    """Raise ``ValueError`` unless ``limit`` per ``window`` seconds is a usable rate.

    The one validation every :class:`OrderLimiter` implementation applies to its
    constructor arguments and to the rate a 429 teaches.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit: must be an integer >= 1, got {limit!r}")
    if not 0 < window < math.inf:
        raise ValueError(f"window: must be a finite number of seconds > 0, got {window!r}")
