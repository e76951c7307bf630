"""The limiter's Lua scripts, run on one redis-py connection kept for them.

The order limiter asks Redis one thing, about once per order: run one of its scripts
(:mod:`~shipping_async.scaleout._lua`). Through ``Redis.evalsha`` (a registered
``AsyncScript``) each call went through redis-py's command layer - a connection taken from
the pool and given back, the retry wrapper, the observability hooks - ~100 us of client
CPU where the socket's round trip is ~30 us. :class:`ScriptConnection` takes one
connection from the pool once and uses it directly: redis-py's own ``send_command`` and
``read_response`` (its command packing, its reply parser - hiredis, which the ``redis``
extra installs - its timeouts, and its disconnect on any error, after which the next call
connects again). One call at a time on it; the limiter makes them one at a time anyway.

A URL is opened the way ``redis.asyncio.Redis.from_url`` opens it (every option redis-py
accepts), with a 2 s connect and a 5 s reply timeout and no retries inside redis-py: an
outage must surface at once, so that the limiter can say why it holds the orders back
(it retries by itself). A client passed in lends one connection of its pool.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError

__all__ = ["Script", "ScriptConnection"]

#: Seconds to connect, and to wait for a reply, on a connection opened from a URL.
CONNECT_TIMEOUT, REPLY_TIMEOUT = 2.0, 5.0


@dataclass(frozen=True, slots=True)
class Script:
    """A Lua script and its SHA-1, the name ``EVALSHA`` calls it by."""

    body: str
    sha: str

    @classmethod
    def of(cls, body: str) -> Script:
        return cls(body, hashlib.sha1(body.encode(), usedforsecurity=False).hexdigest())


class ScriptConnection:
    """Runs scripts on one connection of ``redis`` (a URL, or a client lending its pool).

    Raises :class:`redis.exceptions.RedisError` when Redis cannot be reached or refuses.
    """

    __slots__ = ("_connection", "_lock", "_owned", "_pool")

    def __init__(self, redis: str | aioredis.Redis) -> None:
        if isinstance(redis, str):
            self._pool: aioredis.ConnectionPool = aioredis.ConnectionPool.from_url(
                redis,
                socket_connect_timeout=CONNECT_TIMEOUT,
                socket_timeout=REPLY_TIMEOUT,
                retry=Retry(NoBackoff(), 0),
            )
            self._owned = True
        else:
            self._pool = redis.connection_pool
            self._owned = False
        self._connection: AbstractConnection | None = None
        self._lock: asyncio.Lock | None = None

    async def run(self, script: Script, keys: Sequence[str], args: Sequence[str | int]) -> Any:
        """The script's reply; the script is sent whole if Redis does not know it yet."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            connection = self._connection
            if connection is None:
                connection = await self._pool.get_connection()  # type: ignore[no-untyped-call]
                self._connection = connection
            try:
                return await _call(connection, "EVALSHA", script.sha, len(keys), *keys, *args)
            except NoScriptError:
                # A new, restarted or flushed Redis: EVAL runs it and caches it.
                return await _call(connection, "EVAL", script.body, len(keys), *keys, *args)

    async def aclose(self) -> None:
        """Give the connection back; close the pool if it was made here."""
        connection, self._connection = self._connection, None
        if connection is not None:
            await self._pool.release(connection)
        if self._owned:
            self._owned = False
            await self._pool.aclose()


async def _call(connection: AbstractConnection, *words: str | int) -> Any:
    # redis-py reconnects in send_command when the connection was dropped (it drops it on
    # any error, a cancelled read included, so no reply is ever read by the wrong call).
    await connection.send_command(*words)
    return await connection.read_response()
