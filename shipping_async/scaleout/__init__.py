"""Many workers on many hosts: the order limiter on Redis, the journal and work queue on PostgreSQL.

The modules import their drivers (``redis``, ``asyncpg``; extras ``[redis]`` and
``[postgres]``) when imported themselves, so this package stays importable without them:

- :mod:`shipping_async.scaleout.redis_limiter`: ``RedisOrderLimiter``
- :mod:`shipping_async.scaleout.postgres_journal`: ``PostgresJournal``
- :mod:`shipping_async.scaleout.factory`: ``open_journal``, ``open_limiter`` from a URL
"""
