"""The one clock every protocol duration runs on: rate windows, retry delays, validity.

Three implementations share the :class:`Clock` protocol:

- :class:`SystemClock`: real time; what production code uses.
- :class:`ScaledClock`: protocol time runs ``speed`` times faster than real time, so a
  60 s window passes in ``60 / speed`` real seconds. The sandbox runs on one.
- :class:`ManualClock`: virtual time that only moves when a test advances it (or, with
  ``auto_advance=True``, jumps to the next sleeper's deadline), for deterministic tests.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock", "ScaledClock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """Where time comes from: a monotonic reading, a wall-clock reading and a sleep."""

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin; never goes backwards."""
        ...

    def now(self) -> datetime:
        """The current wall-clock time, timezone-aware (UTC)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Suspend the calling task for ``seconds`` of this clock's time."""
        ...

    def from_real(self, seconds: float) -> float:
        """How much of this clock's time passes in ``seconds`` of real time.

        Durations a server states (a 429 window, ``Retry-After``) are real seconds; a
        scaled clock must stretch them before sleeping on them.
        """
        ...


class SystemClock:
    """Real time: ``time.monotonic``, ``datetime.now(UTC)`` and ``asyncio.sleep``."""

    __slots__ = ()

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def from_real(self, seconds: float) -> float:
        return seconds

    def __repr__(self) -> str:
        return "SystemClock()"


class ScaledClock:
    """Protocol time that runs ``speed`` times faster than real time.

    >>> clock = ScaledClock(speed=100)  # a 60 s rate window lasts 0.6 real seconds
    """

    __slots__ = ("_real_origin", "_speed", "_wall_origin")

    def __init__(self, speed: float = 1.0) -> None:
        if speed <= 0:
            raise ValueError(f"speed: must be > 0, got {speed!r}")
        self._speed = float(speed)
        self._real_origin = time.monotonic()
        self._wall_origin = datetime.now(UTC)

    @property
    def speed(self) -> float:
        return self._speed

    def monotonic(self) -> float:
        return (time.monotonic() - self._real_origin) * self._speed

    def now(self) -> datetime:
        return self._wall_origin + timedelta(seconds=self.monotonic())

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds) / self._speed)

    def to_real(self, seconds: float) -> float:
        """How many real seconds ``seconds`` of protocol time last."""
        return seconds / self._speed

    def from_real(self, seconds: float) -> float:
        return seconds * self._speed

    def __repr__(self) -> str:
        return f"ScaledClock(speed={self._speed:g})"


class ManualClock:
    """Virtual time for tests: nothing moves until :meth:`advance` (or auto-advance) says so.

    With ``auto_advance=True`` a background task jumps time to the earliest pending
    sleeper whenever the event loop has nothing else to run, so a test of a 60 s window
    finishes in milliseconds and its timings are exact.
    """

    __slots__ = ("_auto_advance", "_counter", "_now", "_sleepers", "_wall_origin", "_watcher")

    def __init__(
        self,
        start: float = 0.0,
        *,
        wall_origin: datetime | None = None,
        auto_advance: bool = False,
    ) -> None:
        self._now = float(start)
        self._wall_origin = wall_origin or datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._counter = itertools.count()
        self._auto_advance = auto_advance
        self._watcher: asyncio.Task[None] | None = None

    def monotonic(self) -> float:
        return self._now

    def now(self) -> datetime:
        return self._wall_origin + timedelta(seconds=self._now)

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._counter), future))
        if self._auto_advance:
            self._ensure_watcher()
        await future

    def from_real(self, seconds: float) -> float:
        # Virtual time has no relation to real time; a stated duration is taken as is.
        return seconds

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper whose deadline has come."""
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        self._now += seconds
        self._wake_due()

    def _wake_due(self) -> None:
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)

    def _ensure_watcher(self) -> None:
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(self._advance_when_idle())

    async def _advance_when_idle(self) -> None:
        # Yield enough times for every runnable task to reach its next await; only then
        # is it safe to say nothing else will happen before the next deadline.
        while self._sleepers:
            for _ in range(20):
                await asyncio.sleep(0)
            live = [entry for entry in self._sleepers if not entry[2].done()]
            if not live:
                self._sleepers.clear()
                return
            heapq.heapify(live)
            self._sleepers = live
            self._now = max(self._now, live[0][0])
            self._wake_due()

    def __repr__(self) -> str:
        return f"ManualClock(now={self._now:g})"
