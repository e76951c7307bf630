"""The order limiter: permits for POST /orders, held long enough that no window overflows.

INTERFACE ONLY for now; the rolling-window implementation lands in this module.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import msgspec

__all__ = ["OrderLimiter", "Permit"]


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
    """

    @property
    def limit(self) -> int: ...

    @property
    def window(self) -> float: ...

    async def acquire(self, *, front: bool = False) -> Permit: ...

    async def release(self, permit: Permit, *, sent: bool) -> None: ...

    async def pause(
        self, seconds: float, *, limit: int | None = None, window: float | None = None
    ) -> None: ...
