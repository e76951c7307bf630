"""Many workers on many hosts: the order limiter on Redis, the journal and work queue on PostgreSQL.

The modules import their drivers (``redis``, ``asyncpg``; extras ``[redis]`` and
``[postgres]``) when imported themselves, so this package stays importable without them:

- :mod:`shipping_async.scaleout.redis_limiter`: ``RedisOrderLimiter``
- :mod:`shipping_async.scaleout.postgres_journal`: ``PostgresJournal``
- :mod:`shipping_async.scaleout.factory`: ``open_journal``, ``open_limiter`` from a URL
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shipping_async.scaleout.factory import open_journal, open_limiter
    from shipping_async.scaleout.postgres_journal import PostgresJournal
    from shipping_async.scaleout.redis_limiter import RedisOrderLimiter

__all__ = ["PostgresJournal", "RedisOrderLimiter", "open_journal", "open_limiter"]

# Each name is imported on first use, with its driver: ``import shipping_async.scaleout``
# must work without the optional extras installed.
_LAZY = {
    "PostgresJournal": "shipping_async.scaleout.postgres_journal",
    "RedisOrderLimiter": "shipping_async.scaleout.redis_limiter",
    "open_journal": "shipping_async.scaleout.factory",
    "open_limiter": "shipping_async.scaleout.factory",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
