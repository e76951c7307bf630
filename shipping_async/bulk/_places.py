"""Waiting for room, the stop or a store, without a task per wait: signals and places.

A job that waits for a place ("until the run stops") used to race two tasks, one on the
semaphore and one on the stop event, and cancel the loser: two tasks, a cancellation and
a gather per job. Here a waiter is one future. :class:`Signal` is an
:class:`asyncio.Event` that also calls its listeners when it is next set, so whatever
waits for it among other things (the runner's stop, the journal store's return) adds a
callback instead of a task; :class:`Places` is a FIFO counting semaphore whose waiters
can leave (``False``) when the stop signal is set.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable

__all__ = ["Places", "Signal"]


class Signal(asyncio.Event):
    """An :class:`asyncio.Event` that calls its listeners (once each) when it is next set."""

    def __init__(self) -> None:
        super().__init__()
        self._listeners: list[Callable[[], None]] = []

    def set(self) -> None:
        super().set()
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener()

    def listen(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` when the signal is set (at once if it is set already)."""
        if self.is_set():
            listener()
        else:
            self._listeners.append(listener)

    def unlisten(self, listener: Callable[[], None]) -> None:
        """Forget ``listener`` (a no-op if it was called or never added)."""
        with contextlib.suppress(ValueError):
            self._listeners.remove(listener)


class Places:
    """``count`` places, taken and given back; waiters served first come, first served.

    :meth:`take` with ``unless_stopped`` gives up (``False``) once ``stop`` is set while it
    waits; a free place is taken at once either way (no race with the stop). A place given
    back goes straight to the first waiter, so no late comer takes it first.
    """

    __slots__ = ("_free", "_stop", "_waiters")

    def __init__(self, count: int, stop: Signal | None = None) -> None:
        if count < 0:
            raise ValueError(f"count: must be >= 0, got {count}")
        self._free = count
        self._stop = stop
        # Each waiter: its future (True: a place was handed over; False: stopped) and
        # whether it leaves on the stop.
        self._waiters: deque[tuple[asyncio.Future[bool], bool]] = deque()
        if stop is not None:
            stop.listen(self._stopped)

    def locked(self) -> bool:
        """True when a :meth:`take` would wait."""
        return self._free == 0 or bool(self._waiters)

    async def take(self, *, unless_stopped: bool = False) -> bool:
        """Take a place, waiting for one if none is free; ``False`` (nothing taken) if
        ``unless_stopped`` and the stop came first."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return True
        stop = self._stop
        if unless_stopped and stop is not None and stop.is_set():
            return False
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        entry = (waiter, unless_stopped)
        self._waiters.append(entry)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.result():
                self.give()  # handed a place as it was cancelled: pass it on
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(entry)
            raise

    def take_now(self, most: int) -> int:
        """Take up to ``most`` free places without waiting (none while others wait);
        how many were taken."""
        if self._waiters or most <= 0:
            return 0
        taken = min(most, self._free)
        self._free -= taken
        return taken

    def give(self) -> None:
        """Give a place back: to the first waiter, else to the free ones."""
        waiters = self._waiters
        while waiters:
            waiter, _ = waiters.popleft()
            if not waiter.done():
                waiter.set_result(True)
                return
        self._free += 1

    def _stopped(self) -> None:
        """The stop: every waiter that leaves on it is told ``False``."""
        kept: deque[tuple[asyncio.Future[bool], bool]] = deque()
        for waiter, leaves in self._waiters:
            if waiter.done():
                continue
            if leaves:
                waiter.set_result(False)
            else:
                kept.append((waiter, leaves))
        self._waiters = kept
