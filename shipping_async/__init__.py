"""asyncio SDK for the cross-border shipping API: client, limiter, sandbox, bulk pipeline."""

from shipping_async._version import __version__
from shipping_async.clock import Clock, ManualClock, ScaledClock, SystemClock
from shipping_async.limiter import OrderLimiter, Permit

__all__ = [
    "Clock",
    "ManualClock",
    "OrderLimiter",
    "Permit",
    "ScaledClock",
    "SystemClock",
    "__version__",
]
