"""One account's permits in Redis: the Lua scripts, called with this process's settings.

:class:`PermitStore` is the only code that talks to Redis for the limiter. It converts
durations between the caller's clock (protocol seconds; a scaled clock makes them
shorter) and Redis' real microseconds, and remembers what the scripts report: the rate
every worker shares and the epoch of the Redis data it has seen.
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import uuid4

import redis.asyncio as aioredis

# The in-process limiter's default margin (a share of the window), so both keep one rule.
from shipping_async.limiter import DEFAULT_MARGIN_SHARE
from shipping_async.scaleout import _lua

__all__ = ["PermitStore"]

_log = logging.getLogger("shipping_async.scaleout.redis_limiter")

_US = 1_000_000
# Learned rates and the epoch outlive any batch; one idle day forgets them.
_STATE_TTL_MS = 86_400_000


class PermitStore:
    """The permits of ``account`` under ``keys``; every method is one atomic script run.

    Raises :class:`redis.exceptions.RedisError` when Redis cannot be reached.
    """

    __slots__ = ("_account", "_epoch", "_margin", "_scripts", "_speed", "keys", "limit", "window")

    def __init__(
        self,
        redis: aioredis.Redis,
        *,
        account: str,
        keys: tuple[str, str],
        limit: int,
        window: float,
        margin: float | None,
        speed: float,
    ) -> None:
        self._account = account
        self.keys = keys
        self._speed = speed
        #: The shared rate as last reported (only ever stricter than configured).
        self.limit, self.window = limit, window
        self._margin = margin  # None: a share of the window
        self._epoch = ""  # the copy of the Redis data this process has used
        self._scripts = {
            "acquire": redis.register_script(_lua.ACQUIRE),
            "release": redis.register_script(_lua.RELEASE),
            "take": redis.register_script(_lua.TAKE),
            "pause": redis.register_script(_lua.PAUSE),
        }

    @property
    def margin(self) -> float:
        """Seconds added to every hold and pause, on top of the window."""
        return self.window * DEFAULT_MARGIN_SHARE if self._margin is None else self._margin

    async def acquire(
        self, wanted: int, *, direct: int, lease: float, reserve_lease: float, recheck: float
    ) -> tuple[list[str], float]:
        """Take up to ``wanted`` permits; returns their ids and, if fewer were free, the
        seconds until it is worth asking again (0 otherwise).

        The first ``direct`` are for requests about to be sent: they count for ``lease``.
        The others are fetched ahead (ids ``r:...``) and count for ``reserve_lease``
        until :meth:`take` makes them count for a full lease. While any process holds
        such permits, the wait returned is at most ``recheck``.
        """
        ids = [("" if index < direct else "r:") + uuid4().hex for index in range(wanted)]
        granted, wait = await self._run(
            "acquire", self._us(lease), direct, self._us(reserve_lease), self._us(recheck), *ids
        )
        return ids[:granted], wait

    async def take(self, reserved_id: str, *, lease: float) -> str | None:
        """A permit fetched ahead is about to be used: its id from now on, or ``None``
        if it had expired (or a 429 paused everyone since)."""
        taken, _ = await self._run("take", self._us(lease), reserved_id)
        return reserved_id.removeprefix("r:") if taken else None

    async def release(self, permit_id: str, *, sent: bool) -> None:
        """Count a sent permit from now (window + margin); free an unsent one."""
        await self._run("release", "1" if sent else "0", permit_id)

    async def pause(self, seconds: float, *, limit: int, window: float) -> None:
        """Grant nothing for ``seconds`` + margin; keep the stricter of the rates."""
        await self._run("pause", self._us(seconds), limit, self._us(window))

    async def count(self, *, lease: float) -> int:
        """How many permits count now, across every process."""
        await self._run("acquire", self._us(lease), 0, 0, 0)  # wants none; drops the expired
        redis = self._scripts["acquire"].registered_client
        return int(await redis.zcard(self.keys[0]))

    async def _run(self, script: str, *extra: str | int) -> tuple[int, float]:
        args: list[str | int] = [
            self.limit,
            self._us(self.window),
            -1 if self._margin is None else self._us(self._margin),
            repr(DEFAULT_MARGIN_SHARE),
            self._epoch,
            uuid4().hex,
            _STATE_TTL_MS,
            *extra,
        ]
        reply: list[Any] = await self._scripts[script](keys=list(self.keys), args=args)
        result, wait_us, limit, window_us, _margin_us, raw_epoch = reply
        epoch = raw_epoch.decode() if isinstance(raw_epoch, bytes) else str(raw_epoch)
        if self._epoch and epoch != self._epoch:
            _log.warning(
                "order limiter for account %s: Redis lost its permits (restart or failover); "
                "orders wait one window so that none sent before overflows it",
                self._account,
            )
        self._epoch = epoch
        self.limit = int(limit)
        self.window = self._seconds(int(window_us))
        return int(result), self._seconds(int(wait_us))

    def _us(self, seconds: float) -> int:
        """Seconds of the caller's clock as integer microseconds of Redis' real clock."""
        return round(seconds / self._speed * _US)

    def _seconds(self, us: int) -> float:
        return us / _US * self._speed
