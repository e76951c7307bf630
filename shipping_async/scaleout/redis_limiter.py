"""The order limiter shared through Redis: one account's budget for many workers on many hosts.

:class:`RedisOrderLimiter` keeps the rules of :class:`~shipping_async.limiter.OrderLimiter`
(and of the in-process :class:`~shipping_async.limiter.RollingWindowLimiter`) for every
process that names the same account: a permit is counted from ``acquire`` until its
request's answer + ``window + margin``; a 429 pauses everyone and teaches everyone the
stricter rate. The state lives in Redis and only the Lua scripts of
:mod:`shipping_async.scaleout._lua` change it, atomically, on Redis' own clock.

Quiet and fair: the waiters of one process queue locally (first come, first served,
``front=True`` to the head) and only one task per process - acting for the head of that
queue - talks to Redis. The script answers how long until the next permit frees; the task
sleeps exactly that long plus a little jitter, so the processes of a busy account do not
poll in step (:mod:`shipping_async.scaleout._local_queue`).

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
from types import TracebackType
from typing import Protocol

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from shipping_async._cleartext import warn_if_cleartext
from shipping_async.clock import Clock, ManualClock, SystemClock
from shipping_async.errors import LimiterUnavailableError  # re-exported: it was defined here
from shipping_async.limiter import Permit, check_rate
from shipping_async.scaleout._local_queue import LocalQueue
from shipping_async.scaleout._permit_store import PermitStore
from shipping_async.scaleout._reserve import Reserve

__all__ = ["LimiterUnavailableError", "OrderGateLike", "RedisOrderLimiter"]

_log = logging.getLogger(__name__)

# A permit fetched ahead and not taken within 5 % of a window goes back, or within 1 %
# once its gate stops asking for more (see _reserve).
_RESERVE_IDLE_SHARE = 0.05
_RESERVE_QUIET_SHARE = 0.01


class OrderGateLike(Protocol):
    """What :meth:`RedisOrderLimiter.attach_gate` uses of the bulk pipeline's order gate."""

    @property
    def reserved(self) -> int: ...

    def poke(self) -> None: ...


class RedisOrderLimiter:
    """At most ``limit`` order creations per ``window`` for one account, across processes.

    Example::

        limiter = RedisOrderLimiter("redis://127.0.0.1:6379/0", account="acme")
        client = AsyncShippingClient(token, order_limiter=limiter)

    ``lease``: seconds a permit may stay acquired without a release - the longest a
    request can take (the client's timeout, with some slack). An unreleased permit stays
    counted ``lease + window + margin`` after its acquisition, then frees itself: that is
    what happens to the permits of a worker that dies.

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
        "_owned_client",
        "_pump",
        "_queue",
        "_reserve",
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
        self._owned_client: aioredis.Redis | None = None
        if isinstance(redis, str):
            warn_if_cleartext(redis)
            # No retries inside redis-py: an outage must surface at once, so that the
            # limiter can say why it holds the orders back (it retries by itself).
            redis = self._owned_client = aioredis.Redis.from_url(
                redis, socket_connect_timeout=2.0, socket_timeout=5.0, retry=Retry(NoBackoff(), 0)
            )
        tag = f"{prefix}:{{{account}}}"
        self._store = PermitStore(
            redis,
            account=account,
            keys=(f"{tag}:permits", f"{tag}:state"),
            limit=limit,
            window=float(window),
            margin=margin,
            speed=self._clock.from_real(1.0),  # clock seconds per real (Redis) second
        )
        self._held: set[str] = set()  # granted here and not released
        # Permits taken in Redis ahead of an acquire, for an order gate (see _reserve).
        self._reserve = Reserve(
            idle=float(window) * _RESERVE_IDLE_SHARE, quiet=float(window) * _RESERVE_QUIET_SHARE
        )
        self._queue = LocalQueue(
            self._store,
            self._reserve,
            held=self._held,
            release=lambda permit: self.release(permit, sent=False),
            account=account,
            clock=self._clock,
            lease=self._lease,
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
        """Serve an order gate: keep the ready permits its admitted jobs are about to
        take (``gate.reserved``), and wake it (``gate.poke()``) when permits get ready."""
        self._reserve.promised = lambda: gate.reserved
        self._queue.on_ready = gate.poke

    def next_free_at(self) -> float | None:
        """When (on ``clock.monotonic()``) a permit should be ready here, for an ETA.

        Asking is taken as demand: the caller still waits with every :meth:`available`
        permit spoken for, so more are fetched from Redis ahead of their ``acquire``.
        """
        now = self._clock.monotonic()
        if self._reserve.ask(now, self.limit):
            self._queue.kick()  # a pump watching the reserve fetches at once
        if self._reserve.missing(now):
            self._ensure_pump()
        return self._queue.next_free_at(now)

    def queued(self) -> int:
        """How many acquirers of this process are waiting (others queue in their own)."""
        return self._queue.queued

    async def acquire(self, *, front: bool = False) -> Permit:
        """Wait for a permit, first come first served; ``front=True`` goes to the head."""
        if front or not self._queue.waiting:
            ready = await self._take_ready()
            if ready is not None:
                return ready
        waiter = self._queue.join(front=front)
        self._ensure_pump()
        try:
            return await waiter
        except asyncio.CancelledError:
            granted = self._queue.leave(waiter)
            if granted is not None:
                await asyncio.shield(self.release(granted, sent=False))
            raise

    async def _take_ready(self) -> Permit | None:
        """A permit from the reserve, made to count for a full lease; ``None`` if none."""
        while (ready := self._reserve.take()) is not None:
            self._held.discard(ready.id)
            try:
                taken = await self._store.take(ready.id, lease=self._lease)
            except RedisError:
                taken = None  # it frees itself soon; the pump says why Redis is away
            except asyncio.CancelledError:
                self._held.add(ready.id)
                await asyncio.shield(self.release(ready, sent=False))
                raise
            if taken is not None:  # else expired in Redis, or paused by a 429
                self._held.add(taken)
                return Permit(id=taken, acquired_at=self._clock.monotonic())
        return None

    async def release(self, permit: Permit, *, sent: bool) -> None:
        """Give a permit back: ``sent=True`` if the request may have reached the server.

        Never raises for Redis trouble (it runs on the path of an order's answer): a
        release that cannot be written is logged and left to the permit's lease, which
        covers the request's timeout + window + margin.
        """
        try:
            self._held.remove(permit.id)
        except KeyError:
            raise ValueError(
                f"permit {permit.id} is not held by {self!r}: released twice, or "
                "acquired from another limiter"
            ) from None
        try:
            await self._store.release(permit.id, sent=sent)
        except RedisError as exc:
            _log.warning(
                "order limiter for account %s: could not release a permit in Redis (%s); "
                "its lease frees it in at most %g s",
                self._account,
                exc,
                self._lease + self.window + self.margin,
            )
            return
        if not sent:
            self._queue.kick()  # a permit is free now: the head need not sleep on

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
            await store.pause(seconds, limit=limit, window=window)
        except RedisError as exc:
            # Nothing is granted while Redis is away anyway; keep the lesson locally so
            # that this process honours it (and teaches it) once Redis is back.
            _log.warning("order limiter for account %s: pause not shared (%s)", self._account, exc)
            store.limit, store.window = min(store.limit, limit), max(store.window, window)
        if stricter:
            _log.warning("the server's order limit is stricter than ours; now %r", self)

    async def in_use(self) -> int:
        """How many permits of the account count right now, in every process."""
        return await self._store.count(lease=self._lease)

    async def aclose(self) -> None:
        """Stop waiting, give back permits fetched ahead, close a pool this limiter made."""
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)
        self._queue.cancel_all()
        for permit in self._reserve.clear():
            await self.release(permit, sent=False)
        if self._owned_client is not None:
            client, self._owned_client = self._owned_client, None
            await client.aclose()

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
