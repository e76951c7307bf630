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
poll in step.

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
import contextlib
import logging
import math
import random
from collections import deque
from collections.abc import Sequence
from types import TracebackType
from typing import Any
from uuid import uuid4

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from shipping_async.clock import Clock, ManualClock, ScaledClock, SystemClock
from shipping_async.errors import ShippingError
from shipping_async.limiter import Permit
from shipping_async.scaleout import _lua

__all__ = ["LimiterUnavailableError", "RedisOrderLimiter"]

_log = logging.getLogger(__name__)

_US = 1_000_000
# Same default as the in-process limiter: the margin is 2 % of the window and follows it.
_DEFAULT_MARGIN_SHARE = 0.02
# Learned rates and the epoch outlive any batch; one idle day forgets them.
_STATE_TTL_MS = 86_400_000
# Held permits block a waiter only until their release, which nobody announces; a
# released one frees no sooner than one hold later, so polling once per hold is exact
# enough and still quiet.
_JITTER_SHARE = 0.01
# Reconnect attempts while Redis is away, real seconds.
_RETRY_FIRST, _RETRY_MAX = 0.05, 1.0


class LimiterUnavailableError(ShippingError):
    """The shared order limiter could not be reached, so no order was sent.

    Raised by :meth:`RedisOrderLimiter.acquire` only when ``max_outage`` is set and Redis
    stayed unreachable that long. Nothing was sent; retrying later is safe.
    """


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
        "_epoch",
        "_held",
        "_kick",
        "_lease",
        "_limit",
        "_margin",
        "_max_outage",
        "_outage_since",
        "_owns_client",
        "_pump",
        "_redis",
        "_scripts",
        "_speed",
        "_waiters",
        "_window",
        "keys",
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
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit: must be an integer >= 1, got {limit!r}")
        for name, value in (("window", window), ("lease", lease)):
            if not 0 < value < math.inf:
                raise ValueError(f"{name}: must be a finite number of seconds > 0, got {value!r}")
        if margin is not None and not 0 <= margin < math.inf:
            raise ValueError(f"margin: must be a finite number >= 0, got {margin!r}")
        if not account or any(char in account for char in "{}"):
            raise ValueError(f"account: must be a non-empty name without braces, got {account!r}")
        if isinstance(clock, ManualClock):
            raise ValueError("clock: Redis keeps real time; use SystemClock or ScaledClock")
        self._clock: Clock = clock or SystemClock()
        self._speed = clock.speed if isinstance(clock, ScaledClock) else 1.0
        self._account = account
        self._limit, self._window, self._margin = limit, float(window), margin
        self._lease = float(lease)
        self._max_outage = max_outage
        if isinstance(redis, str):
            # No retries inside redis-py: an outage must surface at once, so that the
            # limiter can say why it holds the orders back (it retries by itself).
            redis = aioredis.Redis.from_url(
                redis, socket_connect_timeout=2.0, socket_timeout=5.0, retry=Retry(NoBackoff(), 0)
            )
            self._owns_client = True
        else:
            self._owns_client = False
        self._redis = redis
        self._scripts = {
            name: redis.register_script(source)
            for name, source in (
                ("acquire", _lua.ACQUIRE),
                ("release", _lua.RELEASE),
                ("pause", _lua.PAUSE),
            )
        }
        tag = f"{prefix}:{{{account}}}"
        self.keys: tuple[str, str] = (f"{tag}:permits", f"{tag}:state")
        self._epoch = ""  # the copy of the Redis data this process has seen permits in
        self._held: set[str] = set()
        self._waiters: deque[asyncio.Future[Permit]] = deque()
        self._pump: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()
        self._outage_since: float | None = None

    @property
    def account(self) -> str:
        """The account whose budget this limiter shares."""
        return self._account

    @property
    def limit(self) -> int:
        """Order creations per window, as last read from Redis (only ever lowered)."""
        return self._limit

    @property
    def window(self) -> float:
        """The window in seconds of the clock, as last read from Redis (only lengthened)."""
        return self._window

    @property
    def margin(self) -> float:
        """Seconds added to every hold and pause, on top of the window."""
        return self._window * _DEFAULT_MARGIN_SHARE if self._margin is None else self._margin

    async def acquire(self, *, front: bool = False) -> Permit:
        """Wait for a permit, first come first served; ``front=True`` goes to the head."""
        waiter: asyncio.Future[Permit] = asyncio.get_running_loop().create_future()
        if front:
            self._waiters.appendleft(waiter)
        else:
            self._waiters.append(waiter)
        if self._pump is None or self._pump.done():
            self._pump = asyncio.get_running_loop().create_task(self._run_pump())
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                # Granted in the same loop iteration as the cancellation: give it back.
                await asyncio.shield(self.release(waiter.result(), sent=False))
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            self._kick.set()  # if nobody waits any more, the pump ends now, not after a nap
            raise

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
            await self._call("release", "1" if sent else "0", permit.id)
        except RedisError as exc:
            _log.warning(
                "order limiter for account %s: could not release a permit in Redis (%s); "
                "its lease frees it in at most %g s",
                self._account,
                exc,
                self._lease + self._window + self.margin,
            )
            return
        if not sent:
            self._kick.set()  # a permit is free now: the head need not sleep on

    async def pause(
        self, seconds: float, *, limit: int | None = None, window: float | None = None
    ) -> None:
        """After a 429: nobody (in any process) acquires for ``seconds`` + margin.

        A stricter ``limit``/``window`` read from the 429 text is adopted by every worker
        of the account, for good.
        """
        if not 0 <= seconds < math.inf:
            raise ValueError(f"seconds: must be a finite number >= 0, got {seconds!r}")
        limit = self._limit if limit is None else limit
        window = self._window if window is None else float(window)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit: must be an integer >= 1, got {limit!r}")
        if not 0 < window < math.inf:
            raise ValueError(f"window: must be a finite number of seconds > 0, got {window!r}")
        stricter = limit < self._limit or window > self._window
        try:
            await self._call("pause", self._us(seconds), limit, self._us(window))
        except RedisError as exc:
            # Nothing is granted while Redis is away anyway; keep the lesson locally so
            # that this process honours it once Redis is back.
            _log.warning("order limiter for account %s: pause not shared (%s)", self._account, exc)
            self._limit, self._window = min(self._limit, limit), max(self._window, window)
        if stricter:
            _log.warning("the server's order limit is stricter than ours; now %r", self)

    async def in_use(self) -> int:
        """How many permits of the account count right now, in every process."""
        await self._call("acquire", self._us(self._lease))  # wants none; drops the expired
        return int(await self._redis.zcard(self.keys[0]))

    async def aclose(self) -> None:
        """Stop waiting for Redis and close the connection pool if this limiter made it."""
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)
        for waiter in self._waiters:
            waiter.cancel()
        self._waiters.clear()
        if self._owns_client:
            await self._redis.aclose()

    async def __aenter__(self) -> RedisOrderLimiter:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _run_pump(self) -> None:
        """Run :meth:`_pump_permits`; if it breaks, its waiters learn why instead of hanging."""
        try:
            await self._pump_permits()
        except Exception as exc:
            _log.exception("order limiter for account %s failed", self._account)
            while self._waiters:
                waiter = self._waiters.popleft()
                if not waiter.done():
                    waiter.set_exception(exc)

    async def _pump_permits(self) -> None:
        """Act for the head of the local queue: ask Redis, hand out, sleep the answer."""
        retry = _RETRY_FIRST
        while True:
            while self._waiters and self._waiters[0].done():
                self._waiters.popleft()
            if not self._waiters:
                return
            # One id per waiter that could be served now; never more than the limit.
            wanted = min(self._limit, sum(not waiter.done() for waiter in self._waiters))
            ids = [uuid4().hex for _ in range(wanted)]
            try:
                granted, wait_us = await self._call("acquire", self._us(self._lease), *ids)
            except RedisError as exc:
                self._fail_closed(exc)
                await self._sleep_real(retry * (1 + random.random()))
                retry = min(_RETRY_MAX, retry * 2)
                continue
            retry = _RETRY_FIRST
            self._recovered()
            for permit_id in self._hand_out(ids[:granted]):
                # Its waiter was cancelled while Redis answered: the permit was never used.
                with contextlib.suppress(RedisError):  # if not, its lease frees it
                    await self._call("release", "0", permit_id)
            if any(not waiter.done() for waiter in self._waiters):
                hold = (self._window + self.margin) / self._speed
                wait = min(wait_us / _US, hold)
                await self._nap(wait + random.uniform(0, _JITTER_SHARE * hold))

    def _hand_out(self, ids: Sequence[str]) -> list[str]:
        """Give granted permits to the waiters in queue order; return the ids left over."""
        now = self._clock.monotonic()
        left = list(ids)
        while left and self._waiters:
            waiter = self._waiters.popleft()
            if waiter.done():
                continue
            permit = Permit(id=left.pop(0), acquired_at=now)
            self._held.add(permit.id)
            waiter.set_result(permit)
        return left

    async def _nap(self, seconds: float) -> None:
        """Sleep ``seconds`` (real), or less if a local release frees a permit."""
        self._kick.clear()
        sleeper = asyncio.ensure_future(self._sleep_real(seconds))
        kicked = asyncio.ensure_future(self._kick.wait())
        try:
            await asyncio.wait((sleeper, kicked), return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            kicked.cancel()
            await asyncio.gather(sleeper, kicked, return_exceptions=True)

    async def _sleep_real(self, seconds: float) -> None:
        # Redis' clock is real; the injected clock sleeps protocol seconds.
        await self._clock.sleep(seconds * self._speed)

    async def _call(self, script: str, *extra: str | int) -> tuple[int, int]:
        """Run one script; remember the shared rate and epoch it reports."""
        args: list[str | int] = [
            self._limit,
            self._us(self._window),
            -1 if self._margin is None else self._us(self._margin),
            repr(_DEFAULT_MARGIN_SHARE),
            self._epoch,
            uuid4().hex,
            _STATE_TTL_MS,
            *extra,
        ]
        reply: list[Any] = await self._scripts[script](keys=list(self.keys), args=args)
        result, wait_us, limit, window_us, _margin_us, raw_epoch = reply
        epoch = raw_epoch.decode() if isinstance(raw_epoch, bytes) else str(raw_epoch)
        if self._epoch and epoch != self._epoch:
            _log.warning(
                "order limiter for account %s: Redis lost its permits (restart or failover); "
                "orders wait one window so that none sent before overflows it",
                self._account,
            )
        self._epoch = epoch
        self._limit = int(limit)
        self._window = int(window_us) / _US * self._speed
        return int(result), int(wait_us)

    def _us(self, seconds: float) -> int:
        """Protocol seconds as integer microseconds of Redis' real clock."""
        return round(seconds / self._speed * _US)

    def _fail_closed(self, exc: RedisError) -> None:
        now = self._clock.monotonic()
        if self._outage_since is None:
            self._outage_since = now
            _log.error(
                "order limiter for account %s: Redis unreachable (%s); no order is sent "
                "until it answers again",
                self._account,
                exc,
            )
        if self._max_outage is not None and now - self._outage_since >= self._max_outage:
            error = LimiterUnavailableError(
                f"order limiter for account {self._account}: Redis unreachable for "
                f"{now - self._outage_since:.1f} s ({exc}); no order was sent"
            )
            while self._waiters:
                waiter = self._waiters.popleft()
                if not waiter.done():
                    waiter.set_exception(error)

    def _recovered(self) -> None:
        if self._outage_since is not None:
            _log.warning(
                "order limiter for account %s: Redis answers again; orders resume",
                self._account,
            )
            self._outage_since = None

    def __repr__(self) -> str:
        return (
            f"RedisOrderLimiter(account={self._account!r}, limit={self._limit}, "
            f"window={self._window:g}, margin={self.margin:g})"
        )
