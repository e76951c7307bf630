"""The POST /orders rate limit: N requests per window per account, sliding or fixed.

Counts run on the sandbox clock. A refused (429) request is not counted, so a client that
keeps retrying does not push its own window forward.
"""

from __future__ import annotations

from collections import defaultdict, deque

from shipping_async.clock import Clock
from shipping_async.sandbox._config import RateMode

__all__ = ["RateLimiter"]


class RateLimiter:
    """Admits at most ``limit`` requests per ``window`` seconds for each key.

    ``sliding``: a request is admitted when fewer than ``limit`` admitted requests lie in
    the last ``window`` seconds. ``fixed``: time is cut into windows starting when the
    limiter was created (or reset) and each window admits ``limit`` requests.
    """

    __slots__ = ("_clock", "_fixed", "_origin", "_sliding", "limit", "mode", "window")

    def __init__(self, clock: Clock, *, limit: int, window: float, mode: RateMode) -> None:
        self._clock = clock
        self.limit = limit
        self.window = window
        self.mode = mode
        self._origin = clock.monotonic()
        self._sliding: defaultdict[str, deque[float]] = defaultdict(deque)
        self._fixed: dict[str, tuple[int, int]] = {}

    def admit(self, key: str) -> bool:
        """Count one request for ``key`` if the window has room; ``False`` means 429."""
        now = self._clock.monotonic()
        if self.mode == "fixed":
            index = int((now - self._origin) // self.window)
            current, count = self._fixed.get(key, (index, 0))
            if current != index:
                count = 0
            if count >= self.limit:
                return False
            self._fixed[key] = (index, count + 1)
            return True
        admitted = self._sliding[key]
        while admitted and admitted[0] <= now - self.window:
            admitted.popleft()
        if len(admitted) >= self.limit:
            return False
        admitted.append(now)
        return True

    def reset(self) -> None:
        """Forget every count and start the fixed windows afresh."""
        self._origin = self._clock.monotonic()
        self._sliding.clear()
        self._fixed.clear()
