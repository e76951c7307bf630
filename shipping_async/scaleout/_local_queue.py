"""One process's waiters for a shared order limiter, and the loop that fetches their permits.

The acquirers of one process queue here (first come, first served, ``front=True`` to the
head) and only :meth:`LocalQueue.run` - one task per process, acting for the head of the
queue - talks to Redis. The script answers how long until the next permit frees; the
task sleeps exactly that long plus a little jitter, so the processes of a busy account do
not poll in step.

Fail closed: when Redis cannot be reached, no permit is granted. Waiters keep waiting
(the outage is logged once, with the reason, at ERROR) and carry on when Redis answers
again; with ``max_outage`` set they get :class:`~shipping_async.errors.LimiterUnavailableError`
after that many seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError

from shipping_async.clock import Clock
from shipping_async.errors import LimiterUnavailableError
from shipping_async.limiter import Permit
from shipping_async.scaleout._permit_store import PermitStore
from shipping_async.scaleout._reserve import Reserve

__all__ = ["LocalQueue"]

_log = logging.getLogger("shipping_async.scaleout.redis_limiter")

# Sleeps get up to 0.5 % of a hold added, so that the heads of many processes spread out.
_JITTER_SHARE = 0.005
# Reconnect attempts while Redis is away, real seconds.
_RETRY_FIRST, _RETRY_MAX = 0.05, 1.0


class LocalQueue:
    """The waiters of one process, served by :meth:`run` from Redis and the reserve."""

    __slots__ = (
        "_account",
        "_clock",
        "_free_at",
        "_held",
        "_kick",
        "_lease",
        "_max_outage",
        "_outage_since",
        "_release",
        "_reserve",
        "_speed",
        "_store",
        "_waiters",
        "_watching",
        "on_ready",
    )

    def __init__(
        self,
        store: PermitStore,
        reserve: Reserve,
        *,
        held: set[str],
        release: Callable[[Permit], Awaitable[None]],
        account: str,
        clock: Clock,
        lease: float,
        max_outage: float | None,
    ) -> None:
        self._store = store
        self._reserve = reserve
        self._held = held  # the limiter's: ids granted in this process and not released
        self._release = release  # gives a permit back unsent, through the limiter
        self._account = account
        self._clock = clock
        self._speed = clock.from_real(1.0)  # clock seconds per real (Redis) second
        self._lease = lease
        self._max_outage = max_outage
        self._waiters: deque[asyncio.Future[Permit]] = deque()
        self._free_at: float | None = None  # clock.monotonic() of the next free permit
        self._watching = False  # run() naps only to expire the reserve
        self._kick = asyncio.Event()
        self._outage_since: float | None = None
        #: Called when permits got ready in the reserve (a gate waiting for one looks again).
        self.on_ready: Callable[[], None] = lambda: None

    @property
    def waiting(self) -> bool:
        """Whether anybody is queued (a newcomer must then queue behind them)."""
        return bool(self._waiters)

    @property
    def queued(self) -> int:
        """How many live waiters are queued here."""
        return self._live_waiters()

    def join(self, *, front: bool) -> asyncio.Future[Permit]:
        """Queue a waiter (at the head with ``front``); :meth:`run` must then be running."""
        waiter: asyncio.Future[Permit] = asyncio.get_running_loop().create_future()
        if front:
            self._waiters.appendleft(waiter)
        else:
            self._waiters.append(waiter)
        if self._watching:
            self._kick.set()  # run() only watches the reserve: it must fetch now
        return waiter

    def leave(self, waiter: asyncio.Future[Permit]) -> Permit | None:
        """Take a cancelled waiter out; the permit it was granted meanwhile, if any."""
        granted = None
        if waiter.done() and not waiter.cancelled():
            granted = waiter.result()  # granted in the same loop iteration as the cancel
        elif waiter in self._waiters:
            self._waiters.remove(waiter)
        self.kick()  # if nobody waits any more, run() ends now, not after a nap
        return granted

    def kick(self) -> None:
        """Cut :meth:`run`'s nap short: a permit freed here, or more are wanted now."""
        self._kick.set()

    def next_free_at(self, now: float) -> float | None:
        """When a permit should be ready here; ``None`` while Redis is unreachable."""
        if self._outage_since is not None:
            return None  # unknown until Redis answers again
        if len(self._reserve) or self._free_at is None:
            return now
        # Not later than the reserve's idle time: another process may give permits back.
        return min(max(now, self._free_at), now + self._reserve.idle)

    def cancel_all(self) -> None:
        """Cancel every waiter (the limiter is closing)."""
        for waiter in self._waiters:
            waiter.cancel()
        self._waiters.clear()

    async def run(self) -> None:
        """Serve the queue until nobody waits; if that breaks, the waiters learn why."""
        try:
            await self._serve()
        except Exception as exc:
            _log.exception("order limiter for account %s failed", self._account)
            self._fail_waiters(exc)

    async def _serve(self) -> None:
        """Act for the head of the local queue: ask Redis, hand out, sleep the answer."""
        retry = _RETRY_FIRST
        while True:
            now = self._clock.monotonic()
            for permit in self._reserve.expire(now):
                await self._release(permit)  # nobody took it: others may
            wanted = self._wanted(now)
            if wanted == 0:
                expiry = self._reserve.next_expiry()
                if expiry is None:
                    return
                self._watching = True
                try:
                    await self._nap(expiry - now)  # give back what nobody takes in time
                finally:
                    self._watching = False
                continue
            direct = min(wanted, self._live_waiters())
            try:
                granted, wait = await self._store.acquire(
                    wanted,
                    direct=direct,
                    lease=self._lease,
                    reserve_lease=1.5 * self._reserve.idle,
                    # Unasked-for ones come back after ``quiet``: others look again then.
                    recheck=2 * self._reserve.quiet,
                )
            except RedisError as exc:
                self._fail_closed(exc)
                # Reconnecting is about Redis, whose time is real; the clock's is protocol time.
                await self._clock.sleep(retry * (1 + random.random()) * self._speed)
                retry = min(_RETRY_MAX, retry * 2)
                continue
            retry = _RETRY_FIRST
            self._recovered()
            now = self._clock.monotonic()
            self._free_at = now + wait
            if len(granted) > direct:
                self.on_ready()
            for index, permit_id in enumerate(granted):
                permit = Permit(id=permit_id, acquired_at=now)
                kept = self._to_waiter(permit) if index < direct else self._reserve.offer(permit)
                if kept:
                    self._held.add(permit_id)
                else:  # its waiter was cancelled while Redis answered: never used
                    with contextlib.suppress(RedisError):  # if not, its lease frees it
                        await self._store.release(permit_id, sent=False)
            if len(granted) < wanted:
                # Held permits free only on a release nobody announces, and a released
                # one no sooner than one hold later: never sleep longer than a hold.
                hold = self._store.window + self._store.margin
                nap = min(wait, hold) + random.uniform(0, _JITTER_SHARE * hold)
                await self._nap(nap)

    def _live_waiters(self) -> int:
        while self._waiters and self._waiters[0].done():
            self._waiters.popleft()
        return sum(not waiter.done() for waiter in self._waiters)

    def _wanted(self, now: float) -> int:
        """Permits to ask Redis for now: one per live waiter and per missing reserve."""
        return min(self._store.limit, self._live_waiters() + self._reserve.missing(now))

    def _to_waiter(self, permit: Permit) -> bool:
        """Give a granted permit to the head of the queue; ``False`` if nobody waits."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(permit)
                return True
        return False

    async def _nap(self, seconds: float) -> None:
        """Sleep ``seconds`` of the clock, or less if a local release frees a permit."""
        self._kick.clear()
        sleeper = asyncio.ensure_future(self._clock.sleep(seconds))
        kicked = asyncio.ensure_future(self._kick.wait())
        try:
            await asyncio.wait((sleeper, kicked), return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            kicked.cancel()
            await asyncio.gather(sleeper, kicked, return_exceptions=True)

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
            self._fail_waiters(
                LimiterUnavailableError(
                    f"order limiter for account {self._account}: Redis unreachable for "
                    f"{now - self._outage_since:.1f} s ({exc}); no order was sent"
                )
            )

    def _fail_waiters(self, error: BaseException) -> None:
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
