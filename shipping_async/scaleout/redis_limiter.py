"""The order limiter shared through Redis: one account's budget for many workers on many hosts.

:class:`RedisOrderLimiter` keeps the rules of :class:`~shipping_async.limiter.OrderLimiter`
(and of the in-process :class:`~shipping_async.limiter.RollingWindowLimiter`) for every
process that names the same account: a permit is counted from ``acquire`` until its
request's answer + ``window + margin``; a 429 pauses everyone and teaches everyone the
stricter rate. The state lives in Redis and only the Lua scripts of
:mod:`shipping_async.scaleout._lua` change it, atomically, on Redis' own clock.

Quiet and fair: the waiters of one process queue locally (first come, first served,
``front=True`` to the head) and only one task per process talks to Redis, one script call
per turn carrying the releases of the moment (with their true times) and the permits
wanted, for waiters and for the jobs an order gate is about to admit. The script answers
how long until the next permit frees; the task sleeps exactly that long plus a little
jitter, so the processes of a busy account do not poll in step
(:mod:`shipping_async.scaleout._local_queue`). On the fast path of a busy account an order
costs at most one script call: its permit comes with others fetched for the jobs waiting
at that moment, and its release shares a call with the other releases and fetches.

Fail closed: when Redis cannot be reached, no permit is granted - an order is never sent
unguarded. Waiters keep waiting (the outage is logged once, with the reason, at ERROR)
and carry on when Redis answers again; with ``max_outage`` set they raise
:class:`LimiterUnavailableError` instead after that many seconds. A permit whose worker
dies (or whose release is lost in an outage) is freed by its lease. A Redis that comes
back empty (restarted without persistence) cannot say which orders were just sent, so
the first worker that notices pauses everyone for one window + margin.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from types import TracebackType
from typing import Protocol

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from shipping_async._cleartext import warn_if_cleartext
from shipping_async.clock import Clock, ManualClock, SystemClock
from shipping_async.errors import LimiterUnavailableError  # re-exported: it was defined here
from shipping_async.limiter import Permit, check_rate
from shipping_async.scaleout._local_queue import LocalQueue
from shipping_async.scaleout._permit_store import PermitStore
from shipping_async.scaleout._reserve import Reserve
from shipping_async.scaleout._scripts import ScriptConnection

__all__ = ["LimiterUnavailableError", "OrderGateLike", "RedisOrderLimiter"]

_log = logging.getLogger(__name__)

# A permit fetched ahead for a job about to order counts for one lease more than one
# taken to send at once: it may wait that long for its job (a quote: one request, shorter
# than a lease) before its own request starts (see _reserve).
_AHEAD_SHARE = 1.0
# A sent release is written within 1 % of a window, with the next call if one comes sooner;
# a permit fetched ahead that the gate's jobs no longer want goes back after as long.
_FLUSH_SHARE = 0.05
# ... or within half a window while the account has permits left and nobody waits in line.
_LAZY_SHARE = 0.5


class OrderGateLike(Protocol):
    """What :meth:`RedisOrderLimiter.attach_gate` uses of the bulk pipeline's order gate."""

    @property
    def reserved(self) -> int: ...

    @property
    def wanted(self) -> int: ...

    on_change: Callable[[], None]

    def poke(self) -> None: ...


class RedisOrderLimiter:
    """At most ``limit`` order creations per ``window`` for one account, across processes.

    Example::

        limiter = RedisOrderLimiter("redis://127.0.0.1:6379/0", account="acme")
        client = AsyncShippingClient(token, order_limiter=limiter)

    ``lease``: seconds a permit may stay acquired without a release - the longest a
    request can take (the client's timeout, with some slack). An unreleased permit stays
    counted ``lease + window + margin`` after its acquisition, then frees itself: that is
    what happens to the permits of a worker that dies (a permit fetched ahead for an
    order gate's job counts one lease longer).

    ``clock``: a :class:`~shipping_async.clock.ScaledClock` makes protocol seconds shorter
    (a sandbox at speed 100 has 0.6 real-second windows); Redis' own clock is real, so
    durations are scaled at this boundary. :class:`~shipping_async.clock.ManualClock`
    cannot drive a shared real clock and is refused.

    Keys: ``{prefix}:{{{account}}}:permits`` and ``...:state`` (``shipping:{acme}:permits``).
    """

    __slots__ = (
        "_account",
        "_clock",
        "_held",
        "_lease",
        "_pump",
        "_queue",
        "_reserve",
        "_scripts",
        "_store",
    )

    def __init__(
        self,
        redis: str | aioredis.Redis,
        *,
        account: str,
        limit: int = 20,
        window: float = 60.0,
        margin: float | None = None,
        lease: float = 120.0,
        prefix: str = "shipping",
        clock: Clock | None = None,
        max_outage: float | None = None,
    ) -> None:
        check_rate(limit, window)
        if not 0 < lease < math.inf:
            raise ValueError(f"lease: must be a finite number of seconds > 0, got {lease!r}")
        if margin is not None and not 0 <= margin < math.inf:
            raise ValueError(f"margin: must be a finite number >= 0, got {margin!r}")
        if not account or any(char in account for char in "{}"):
            raise ValueError(f"account: must be a non-empty name without braces, got {account!r}")
        if isinstance(clock, ManualClock):
            raise ValueError("clock: Redis keeps real time; use SystemClock or ScaledClock")
        self._clock: Clock = clock or SystemClock()
        self._account = account
        self._lease = float(lease)
        if isinstance(redis, str):
            warn_if_cleartext(redis)
        # One connection of its own (of a pool made for it from a URL), on first use.
        self._scripts = ScriptConnection(redis)
        tag = f"{prefix}:{{{account}}}"
        self._store = PermitStore(
            self._scripts,
            account=account,
            keys=(f"{tag}:permits", f"{tag}:state"),
            limit=limit,
            window=float(window),
            margin=margin,
            speed=self._clock.from_real(1.0),  # clock seconds per real (Redis) second
        )
        self._held: set[str] = set()  # handed out here and not released
        # Permits taken in Redis ahead of an acquire, for an order gate (see _reserve).
        self._reserve = Reserve(
            ahead=self._lease * _AHEAD_SHARE, grace=float(window) * _FLUSH_SHARE
        )
        self._queue = LocalQueue(
            self._store,
            self._reserve,
            held=self._held,
            account=account,
            clock=self._clock,
            lease=self._lease,
            flush=float(window) * _FLUSH_SHARE,
            lazy=float(window) * _LAZY_SHARE,
            max_outage=max_outage,
        )
        self._pump: asyncio.Task[None] | None = None  # runs the queue while it is needed

    @property
    def account(self) -> str:
        """The account whose budget this limiter shares."""
        return self._account

    @property
    def keys(self) -> tuple[str, str]:
        """The Redis keys of the account: its permits and its shared state."""
        return self._store.keys

    @property
    def limit(self) -> int:
        """Order creations per window, as last read from Redis (only ever lowered)."""
        return self._store.limit

    @property
    def window(self) -> float:
        """The window in seconds of the clock, as last read from Redis (only lengthened)."""
        return self._store.window

    @property
    def margin(self) -> float:
        """Seconds added to every hold and pause, on top of the window."""
        return self._store.margin

    def available(self) -> int:
        """Permits this process holds ready for :meth:`acquire` to return at once."""
        return len(self._reserve)

    def attach_gate(self, gate: OrderGateLike) -> None:
        """Serve an order gate: fetch ahead the permits its jobs want now
        (``gate.wanted``), wake it (``gate.poke()``) when they are ready, and give back
        at once those its jobs no longer want (it calls ``gate.on_change``)."""
        self._reserve.wanted = lambda: gate.wanted
        self._queue.on_ready = gate.poke
        queue = self._queue

        def changed() -> None:
            # After the current tick: a job that stops waiting at the gate to send takes
            # its permit within the tick, and that one is not surplus.
            asyncio.get_running_loop().call_soon(queue.check_reserve)

        gate.on_change = changed

    def next_free_at(self) -> float | None:
        """When (on ``clock.monotonic()``) a permit should be ready here, for an ETA.

        With an order gate attached, its waiting jobs' permits are fetched now.
        """
        if self._reserve.missing(self.limit):
            self._ensure_pump()
            self._queue.kick()
        return self._queue.next_free_at(self._clock.monotonic())

    def queued(self) -> int:
        """How many acquirers of this process are waiting (others queue in their own)."""
        return self._queue.queued

    async def acquire(self, *, front: bool = False) -> Permit:
        """Wait for a permit, first come first served; ``front=True`` goes to the head."""
        if front or not self._queue.waiting:
            now = self._clock.monotonic()
            ready = self._queue.take_ready(now)  # no call: fetched for this job
            if ready is not None:
                self._held.add(ready.id)
                return Permit(id=ready.id, acquired_at=now)
        waiter = self._queue.join(front=front)
        self._ensure_pump()
        try:
            return await waiter
        except asyncio.CancelledError:
            granted = self._queue.leave(waiter)
            if granted is not None:
                await self.release(granted, sent=False)
            raise

    async def release(self, permit: Permit, *, sent: bool) -> None:
        """Give a permit back: ``sent=True`` if the request may have reached the server.

        Returns at once: the release is written with this process's next call to Redis
        (an unsent one within the event-loop tick, a sent one within 1 % of a window),
        dated with its true time. Never raises for Redis trouble (it runs on the path of
        an order's answer): while Redis is away the permit stays counted, and releases
        that cannot be written before its lease runs out are logged and left to it.
        """
        try:
            self._held.remove(permit.id)
        except KeyError:
            raise ValueError(
                f"permit {permit.id} is not held by {self!r}: released twice, or "
                "acquired from another limiter"
            ) from None
        self._queue.release(permit.id, sent=sent)
        self._ensure_pump()

    async def pause(
        self, seconds: float, *, limit: int | None = None, window: float | None = None
    ) -> None:
        """After a 429: nobody (in any process) acquires for ``seconds`` + margin.

        A stricter ``limit``/``window`` read from the 429 text is adopted by every worker
        of the account, for good.
        """
        if not 0 <= seconds < math.inf:
            raise ValueError(f"seconds: must be a finite number >= 0, got {seconds!r}")
        store = self._store
        limit = store.limit if limit is None else limit
        window = store.window if window is None else float(window)
        check_rate(limit, window)
        stricter = limit < store.limit or window > store.window
        try:
            paused = await store.pause(seconds, limit=limit, window=window)
        except RedisError as exc:
            # Nothing is granted while Redis is away anyway; keep the lesson locally so
            # that this process honours it (and teaches it) once Redis is back.
            _log.warning("order limiter for account %s: pause not shared (%s)", self._account, exc)
            store.limit, store.window = min(store.limit, limit), max(store.window, window)
            paused = seconds + store.margin
        queue = self._queue
        queue.paused_until = max(queue.paused_until, self._clock.monotonic() + paused)
        queue.drop_reserve()  # fetched before the 429: not to be used during the pause
        self._ensure_pump()
        if stricter:
            _log.warning("the server's order limit is stricter than ours; now %r", self)

    async def in_use(self) -> int:
        """How many permits of the account count right now, in every process (after
        writing this process's queued releases)."""
        return await self._queue.flush()

    async def aclose(self) -> None:
        """Stop waiting, give back permits fetched ahead, close a pool this limiter made."""
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)
        self._queue.cancel_all()
        self._queue.drop_reserve()
        if self._queue.unwritten:
            try:
                await self._queue.flush()
            except RedisError as exc:
                _log.warning(
                    "order limiter for account %s: could not give back %d permit(s) in Redis "
                    "(%s); their leases free them",
                    self._account,
                    self._queue.unwritten,
                    exc,
                )
        await self._scripts.aclose()

    async def __aenter__(self) -> RedisOrderLimiter:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _ensure_pump(self) -> None:
        if self._pump is None or self._pump.done():
            self._pump = asyncio.get_running_loop().create_task(self._queue.run())

    def __repr__(self) -> str:
        return (
            f"RedisOrderLimiter(account={self._account!r}, limit={self.limit}, "
            f"window={self.window:g}, margin={self.margin:g})"
        )
