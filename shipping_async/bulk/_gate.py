"""The order gate: lets a job record its order intent only when a permit is about to be free.

The client takes its permit inside ``orders.create``, after the pipeline has written the
order intent to the journal. Were every quoted job to write its intent and then queue in
the limiter, a crash would leave each of them ``UNKNOWN`` though most were never sent.
So jobs queue here instead, first come first served, and pass only while the limiter has
more free permits than jobs already let through and not yet sending; the intent is then
written and the request leaves at once. ``available()`` and ``next_free_at()`` come from
:class:`~shipping_async.limiter.RollingWindowLimiter`; with a limiter that lacks them the
gate lets everybody through and the limiter's own queue does the waiting. A limiter that
fetches permits ahead for the gate's jobs (the Redis one) is attached to it
(``attach_gate``): it reads :attr:`OrderGate.wanted` and is told of changes through
``on_change``. While the
journal's store is away (``store_up`` clear) nobody passes: an intent cannot be durable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from shipping_async.bulk._places import Signal
from shipping_async.clock import Clock
from shipping_async.limiter import OrderLimiter

__all__ = ["GateClosedError", "OrderGate"]


class GateClosedError(Exception):
    """The run is stopping: no new order is started."""


class OrderGate:
    """Admits jobs to POST /orders at the pace the limiter can grant permits."""

    __slots__ = (
        "_available",
        "_clock",
        "_limiter",
        "_lock",
        "_next_free_at",
        "_reserved",
        "_stop",
        "_store_up",
        "_timer",
        "_timer_at",
        "_waiting",
        "_waker",
        "on_change",
    )

    def __init__(
        self,
        limiter: OrderLimiter,
        clock: Clock,
        stop: asyncio.Event,
        store_up: asyncio.Event | None = None,
    ) -> None:
        self._limiter = limiter
        self._clock = clock
        self._stop = stop
        self._store_up = store_up
        self._lock = asyncio.Lock()  # FIFO: waiters are admitted in arrival order
        self._reserved = 0  # admitted, permit not yet taken
        self._waiting = 0  # in admit(), not yet admitted
        # The job at the head of the queue waits on one future, woken by poke(), the
        # stop, the store's return or its timer (kept across its waits: see _wait).
        self._waker: asyncio.Future[None] | None = None
        self._timer: asyncio.Task[None] | None = None
        self._timer_at = 0.0
        #: Called when jobs may want fewer permits (one sends, gives its turn back, leaves).
        self.on_change: Callable[[], None] = lambda: None
        available = getattr(limiter, "available", None)
        next_free_at = getattr(limiter, "next_free_at", None)
        self._available: Callable[[], int] | None = available if callable(available) else None
        self._next_free_at: Callable[[], float | None] | None = (
            next_free_at if callable(next_free_at) else None
        )
        attach_gate = getattr(limiter, "attach_gate", None)
        if callable(attach_gate):  # a shared limiter fetching permits ahead for the gate
            attach_gate(self)

    @property
    def closed(self) -> bool:
        """True once the run is stopping."""
        return self._stop.is_set()

    @property
    def reserved(self) -> int:
        """Jobs admitted that have not yet asked the limiter for their permit."""
        return self._reserved

    @property
    def wanted(self) -> int:
        """Permits the gate's jobs want now: one per job admitted and not yet sending, and
        one per job waiting to be admitted (none while stopping or the store is away)."""
        if self._stop.is_set() or (self._store_up is not None and not self._store_up.is_set()):
            return self._reserved
        return self._reserved + self._waiting

    async def admit(self) -> None:
        """Wait for the turn to order; raises :class:`GateClosedError` once stopping."""
        # Nobody in line and a permit free: the turn is now, without the lock (every
        # order of a batch whose limit is lifted, most of a worker's). Anyone in line
        # (``_waiting``) is never passed by.
        if (
            not self._waiting
            and not self._stop.is_set()
            and (self._store_up is None or self._store_up.is_set())
            and (self._available is None or self._available() > self._reserved)
        ):
            self._reserved += 1
            return
        self._waiting += 1
        try:
            async with self._lock:
                try:
                    while True:
                        if self._stop.is_set():
                            raise GateClosedError
                        if self._store_up is not None and not self._store_up.is_set():
                            await self._wait()
                            continue
                        if self._available is None or self._available() > self._reserved:
                            self._reserved += 1
                            return
                        await self._wait()
                finally:
                    if self._timer is not None:  # the next head of the queue sets its own
                        self._timer.cancel()
                        self._timer = None
        except BaseException:
            self.on_change()  # one job fewer wants a permit
            raise
        finally:
            self._waiting -= 1

    def sending(self) -> None:
        """The admitted job is calling ``orders.create`` now: it takes the permit itself."""
        self._reserved -= 1
        self.on_change()
        self.poke()

    def poke(self) -> None:
        """Something changed (a permit was released): the job waiting looks again."""
        waker = self._waker
        if waker is not None and not waker.done():
            waker.set_result(None)

    def _woken(self, _: object = None) -> None:
        self.poke()

    async def _wait(self) -> None:
        """Wait until poked, stopped, the store is back (while it is away), or the delay
        below is over; whoever comes first."""
        loop = asyncio.get_running_loop()
        # Listening before the limiter is asked: asking may make it poke at once.
        waker = self._waker = loop.create_future()
        events: list[asyncio.Event] = []
        watchers: list[asyncio.Task[Any]] = []
        timer: asyncio.Task[None] | None = None
        try:
            at = self._next_free_at() if self._next_free_at is not None else None
            window = self._limiter.window
            now = self._clock.monotonic()
            # Permits held by requests still in flight free on their release (a poke);
            # the timeout covers a release that happened outside this pipeline.
            delay = window / 50 if at is None else max(at - now, window / 1000)
            # Look again within a tenth of a window whatever the limiter last said: asking
            # it (above) is what makes a shared limiter fetch the permits its jobs want,
            # and the journal's store may have gone and come back meanwhile (while it is
            # away its jobs want none, and that limiter may have stopped asking Redis).
            delay = min(delay, window / 10)
            # One timer for the waits of one job: a poke wakes it again and again before
            # its delay is over; the timer is kept while it is due no later than this
            # wait's (an early wake-up only makes the job look again), and cancelled
            # when the job leaves the gate (admit).
            timer = self._timer
            if timer is None or timer.done() or self._timer_at > now + delay:
                if timer is not None:
                    timer.cancel()
                timer = self._timer = loop.create_task(self._clock.sleep(delay))
                self._timer_at = now + delay
            timer.add_done_callback(self._woken)
            events.append(self._stop)
            if self._store_up is not None and not self._store_up.is_set():
                events.append(self._store_up)
            for event in events:
                if isinstance(event, Signal):
                    event.listen(self.poke)
                else:  # a plain Event (a gate built by hand): a task watches it
                    watcher = loop.create_task(event.wait())
                    watcher.add_done_callback(self._woken)
                    watchers.append(watcher)
            await waker
        finally:
            self._waker = None
            if timer is not None:
                timer.remove_done_callback(self._woken)
            for event in events:
                if isinstance(event, Signal):
                    event.unlisten(self.poke)
            for watcher in watchers:
                # Not heard when it ends cancelled: it would poke the next wait's waker.
                watcher.remove_done_callback(self._woken)
                watcher.cancel()
