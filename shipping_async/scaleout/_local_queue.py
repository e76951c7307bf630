"""One process's waiters for a shared order limiter, and the loop that talks to Redis for them.

The acquirers of one process queue here (first come, first served, ``front=True`` to the
head) and only :meth:`LocalQueue.run` - one task per process and account - talks to
Redis: one script call per turn (:meth:`~shipping_async.scaleout._permit_store.PermitStore.sync`)
carries everything the process has for the account:

- the releases queued since the last call, each dated with its true time. An unsent one
  (its permit is free for others now) makes the call due at once, so the releases of one
  event-loop tick share it; a sent one rides along with the next call, at the latest
  ``flush`` seconds later - or ``lazy`` seconds while the last call found permits left
  and nobody waiting in line: then no process needs to know yet. Its permit stays
  counted meanwhile, and counts from its true release time however late it is written,
  so holding it back never shortens a hold: it only delays other processes' view of
  when it frees.
- the permits wanted: one per waiter, and for the reserve what the order gate's jobs want
  now (see :mod:`~shipping_async.scaleout._reserve`).

When fewer permits are free than wanted, the script says how long until the next frees;
the task asks again then (at most one hold later: a held permit frees on a release that
is not announced) plus a little jitter, so the processes of a busy account do not poll in
step.

Fail closed: when Redis cannot be reached, no permit is granted. Waiters keep waiting
(the outage is logged once, with the reason, at ERROR) and carry on when Redis answers
again; with ``max_outage`` set they get :class:`~shipping_async.errors.LimiterUnavailableError`
after that many seconds. Releases wait for Redis with their true times.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections import deque
from collections.abc import Callable, Iterable

from redis.exceptions import RedisError

from shipping_async.clock import Clock
from shipping_async.errors import LimiterUnavailableError
from shipping_async.limiter import Permit
from shipping_async.scaleout._permit_store import PermitStore, Release
from shipping_async.scaleout._reserve import Reserve

__all__ = ["LocalQueue"]

_log = logging.getLogger("shipping_async.scaleout.redis_limiter")

# Asks after a refusal get up to 0.5 % of a hold added, so that the heads of many
# processes spread out.
_JITTER_SHARE = 0.005
# Reconnect attempts while Redis is away, real seconds.
_RETRY_FIRST, _RETRY_MAX = 0.05, 1.0


class LocalQueue:
    """The waiters of one process, served by :meth:`run` from Redis and the reserve."""

    __slots__ = (
        "_account",
        "_ahead",
        "_blocked_until",
        "_clock",
        "_contended",
        "_due",
        "_flush",
        "_free_at",
        "_held",
        "_lazy",
        "_lease",
        "_max_outage",
        "_napping_until",
        "_outage_since",
        "_outbox",
        "_reserve",
        "_retry",
        "_retry_at",
        "_speed",
        "_store",
        "_waiters",
        "_waker",
        "on_ready",
        "paused_until",
    )

    def __init__(
        self,
        store: PermitStore,
        reserve: Reserve,
        *,
        held: set[str],
        account: str,
        clock: Clock,
        lease: float,
        flush: float,
        lazy: float,
        max_outage: float | None,
    ) -> None:
        self._store = store
        self._reserve = reserve
        self._held = held  # the limiter's: ids handed out in this process and not released
        self._account = account
        self._clock = clock
        self._speed = clock.from_real(1.0)  # clock seconds per real (Redis) second
        self._lease = lease
        self._ahead = reserve.ahead
        self._flush = flush
        self._lazy = lazy
        self._contended = True  # as the last call found (unknown: as if so)
        self._max_outage = max_outage
        self._waiters: deque[asyncio.Future[Permit]] = deque()
        # Releases not yet written: (id, sent, released at on the clock), and when the
        # next call must write them.
        self._outbox: list[tuple[str, bool, float]] = []
        self._due = math.inf
        self._retry_at = -math.inf  # no permit is free in Redis before this, as last told
        self._blocked_until = -math.inf  # Redis away: the next attempt
        self._retry = _RETRY_FIRST
        self._napping_until = math.inf
        self._free_at: float | None = None  # clock.monotonic() of the next free permit
        self._waker: asyncio.Future[None] | None = None  # ends the nap in progress
        self._outage_since: float | None = None
        #: Until when (clock.monotonic()) everyone is paused, as last told by Redis.
        self.paused_until = -math.inf
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
        self.kick()
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
        """Cut :meth:`run`'s nap short: something to do may be due now."""
        waker = self._waker
        if waker is not None and not waker.done():
            waker.set_result(None)

    def release(self, permit_id: str, *, sent: bool) -> None:
        """Queue a release for the next call: at once if unsent, within ``flush`` if sent."""
        now = self._clock.monotonic()
        self._outbox.append((permit_id, sent, now))
        due = now if not sent else now + (self._flush if self._contended else self._lazy)
        if due < self._due:
            self._due = due
            if due < self._napping_until:
                self.kick()

    def take_ready(self, now: float) -> Permit | None:
        """A permit from the reserve, fresh enough for a full lease; ``None`` if none."""
        if now < self.paused_until:
            self._give_back(self._reserve.clear())  # a 429 paused everyone since
            return None
        permit, stale = self._reserve.take(now)
        self._give_back(stale)
        return permit

    def drop_reserve(self) -> None:
        """Give back every permit fetched ahead (a pause, or closing)."""
        self._give_back(self._reserve.clear())

    def check_reserve(self) -> None:
        """The gate's jobs may want fewer permits: wake :meth:`run` if some are surplus."""
        if len(self._reserve) > max(0, self._reserve.wanted()) and (
            self._napping_until > self._clock.monotonic() + self._reserve.grace
        ):
            self.kick()

    def next_free_at(self, now: float) -> float | None:
        """When a permit should be ready here; ``None`` while Redis is unreachable."""
        if self._outage_since is not None:
            return None  # unknown until Redis answers again
        if len(self._reserve) or self._free_at is None:
            return now
        return max(now, self._free_at)

    def cancel_all(self) -> None:
        """Cancel every waiter (the limiter is closing)."""
        for waiter in self._waiters:
            waiter.cancel()
        self._waiters.clear()

    async def flush(self) -> int:
        """Write the queued releases now; how many permits of the account count then."""
        now = self._clock.monotonic()
        sending, self._outbox, self._due = self._outbox, [], math.inf
        try:
            synced = await self._store.sync(self._releases(sending, now), lease=self._lease)
        except RedisError:
            self._requeue(sending, now)
            raise
        return synced.in_use

    @property
    def unwritten(self) -> int:
        """Releases queued and not yet written."""
        return len(self._outbox)

    async def run(self) -> None:
        """Serve the queue until nothing is left to do; if that breaks, the waiters learn why."""
        try:
            await self._serve()
        except Exception as exc:
            _log.exception("order limiter for account %s failed", self._account)
            self._fail_waiters(exc)

    async def _serve(self) -> None:
        """Act for the waiters and the reserve: one call per turn, then sleep the answer."""
        while True:
            now = self._clock.monotonic()
            self._give_back(self._reserve.surplus(now, self._store.limit))
            wanted = self._wanted()
            call_at = self._due
            if wanted:
                call_at = min(call_at, self._retry_at)
            call_at = max(call_at, self._blocked_until)
            if call_at > now:
                wake_at = min(call_at, self._reserve.wake_at())
                if wake_at == math.inf:
                    return  # nothing wanted, nothing to write, nothing to watch
                await self._nap(wake_at - now)
                continue
            sending, self._outbox, self._due = self._outbox, [], math.inf
            direct = min(wanted, self._live_waiters())
            try:
                synced = await self._store.sync(
                    self._releases(sending, now),
                    wanted=wanted,
                    direct=direct,
                    lease=self._lease,
                    ahead=self._ahead,
                )
            except RedisError as exc:
                self._requeue(sending, now)
                self._fail_closed(exc)
                continue
            self._recovered()
            self._contended = synced.contended
            if synced.contended and self._outbox:
                # Others may wait for what frees now: releases held back are due sooner.
                self._due = min(self._due, self._clock.monotonic() + self._flush)
            self._hand_out(synced.granted, direct, asked_at=now)
            now = self._clock.monotonic()
            if synced.paused > 0:
                self.paused_until = now + synced.paused
                self.drop_reserve()  # fetched before the pause: not to be used during it
            self._free_at = now + synced.wait
            if synced.wait > 0:
                # None is left: asking before the next frees is pointless. Held permits
                # free only on a release nobody announces, and a released one no sooner
                # than one hold later: never wait longer than a hold.
                hold = self._store.window + self._store.margin
                self._retry_at = (
                    now + min(synced.wait, hold) + random.uniform(0, _JITTER_SHARE * hold)
                )
            else:
                self._retry_at = -math.inf

    def _hand_out(self, granted: list[str], direct: int, *, asked_at: float) -> None:
        """Granted permits to the waiters (the first ``direct``) and the reserve."""
        ready = False
        for index, permit_id in enumerate(granted):
            # Dated when it was asked for: Redis counts it from a later moment, so its
            # age here is never less than its age there.
            permit = Permit(id=permit_id, acquired_at=asked_at)
            if index < direct:
                if self._to_waiter(permit):
                    self._held.add(permit_id)
                    continue
            elif self._reserve.missing(self._store.limit) > 0:
                self._reserve.add(permit)
                ready = True
                continue
            self.release(permit_id, sent=False)  # its waiter or job went away meanwhile
        if ready:
            self.on_ready()

    def _releases(self, sending: list[tuple[str, bool, float]], now: float) -> list[Release]:
        return [Release(permit_id, sent, now - at) for permit_id, sent, at in sending]

    def _requeue(self, sending: list[tuple[str, bool, float]], now: float) -> None:
        """Releases that could not be written go back first, with their true times; those
        older than any permit can live in Redis matter no more."""
        oldest = now - (self._lease + self._ahead + self._store.window + self._store.margin)
        kept = [item for item in sending if item[2] > oldest]
        if len(kept) < len(sending):
            _log.warning(
                "order limiter for account %s: %d release(s) could not be written to Redis "
                "before their permits' leases ran out",
                self._account,
                len(sending) - len(kept),
            )
        self._outbox[:0] = kept
        if self._outbox:
            self._due = min(self._due, now)

    def _give_back(self, permits: Iterable[Permit]) -> None:
        for permit in permits:
            self.release(permit.id, sent=False)

    def _live_waiters(self) -> int:
        while self._waiters and self._waiters[0].done():
            self._waiters.popleft()
        return sum(not waiter.done() for waiter in self._waiters)

    def _wanted(self) -> int:
        """Permits to ask Redis for now: one per live waiter and per missing reserve."""
        limit = self._store.limit
        return min(limit, self._live_waiters() + self._reserve.missing(limit))

    def _to_waiter(self, permit: Permit) -> bool:
        """Give a granted permit to the head of the queue; ``False`` if nobody waits."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(permit)
                return True
        return False

    async def _nap(self, seconds: float) -> None:
        """Sleep ``seconds`` of the clock, or less if kicked.

        One future and one timer, not a sleeping task and a waiting task per nap (the
        pump naps about twice per order). The timer runs in real seconds, as Redis does:
        the clock's seconds converted at this boundary (``ManualClock`` is refused).
        """
        loop = asyncio.get_running_loop()
        waker: asyncio.Future[None] = loop.create_future()
        self._waker = waker
        self._napping_until = self._clock.monotonic() + seconds
        timer = loop.call_later(max(0.0, seconds) / self._speed, _wake, waker)
        try:
            await waker
        finally:
            timer.cancel()
            self._waker = None
            self._napping_until = math.inf

    def _fail_closed(self, exc: RedisError) -> None:
        now = self._clock.monotonic()
        # Reconnecting is about Redis, whose time is real; the clock's is protocol time.
        self._blocked_until = now + self._retry * (1 + random.random()) * self._speed
        self._retry = min(_RETRY_MAX, self._retry * 2)
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
        self._retry, self._blocked_until = _RETRY_FIRST, -math.inf
        if self._outage_since is not None:
            _log.warning(
                "order limiter for account %s: Redis answers again; orders resume",
                self._account,
            )
            self._outage_since = None


def _wake(waker: asyncio.Future[None]) -> None:
    if not waker.done():
        waker.set_result(None)
