"""One account's permits in Redis: the Lua scripts, called with this process's settings.

:class:`PermitStore` is the only code that talks to Redis for the limiter (on a
:class:`~shipping_async.scaleout._scripts.ScriptConnection`). It converts durations between the
caller's clock (protocol seconds; a scaled clock makes them shorter) and Redis' real
microseconds, and remembers what the scripts report: the rate every worker shares and the
epoch of the Redis data it has seen.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from typing import Any, NamedTuple
from uuid import uuid4

# The in-process limiter's default margin (a share of the window), so both keep one rule.
from shipping_async.limiter import DEFAULT_MARGIN_SHARE
from shipping_async.scaleout import _lua
from shipping_async.scaleout._scripts import Script, ScriptConnection

__all__ = ["PermitStore", "Release", "Synced"]

_log = logging.getLogger("shipping_async.scaleout.redis_limiter")

_US = 1_000_000
# Learned rates and the epoch outlive any batch; one idle day forgets them.
_STATE_TTL_MS = 86_400_000
_SYNC, _PAUSE = Script.of(_lua.SYNC), Script.of(_lua.PAUSE)


class Release(NamedTuple):
    """A permit given back: its id, whether its request may have reached the server, and
    how many seconds (of the clock) ago that was."""

    id: str
    sent: bool
    age: float


class Synced(NamedTuple):
    """What one :meth:`PermitStore.sync` got: the ids granted; if none is left, the
    seconds until it is worth asking again (else 0); the seconds everyone is still paused
    (0 if not); how many permits of the account count now; whether none is left or a
    process waits in line (releases matter to others now)."""

    granted: list[str]
    wait: float
    paused: float
    in_use: int
    contended: bool


class PermitStore:
    """The permits of ``account`` under ``keys``; every method is one atomic script run.

    Raises :class:`redis.exceptions.RedisError` when Redis cannot be reached.
    """

    __slots__ = (
        "_account",
        "_epoch",
        "_margin",
        "_name",
        "_scripts",
        "_serial",
        "_speed",
        "keys",
        "limit",
        "window",
    )

    def __init__(
        self,
        scripts: ScriptConnection,
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
        self._name = uuid4().hex  # this process's place in the account's line
        # Permit ids and fresh epochs: this store's name and a serial number, unique
        # across processes without a uuid (an urandom call) for each.
        self._serial = itertools.count()
        self._scripts = scripts

    @property
    def margin(self) -> float:
        """Seconds added to every hold and pause, on top of the window."""
        return self.window * DEFAULT_MARGIN_SHARE if self._margin is None else self._margin

    async def sync(
        self,
        releases: Sequence[Release] = (),
        *,
        wanted: int = 0,
        direct: int = 0,
        lease: float,
        ahead: float = 0.0,
    ) -> Synced:
        """Everything this process has for the account, in one script run.

        ``releases`` are written first: a sent permit counts from its true release time
        (``age`` seconds before Redis reads its clock) for window + margin, an unsent
        one is freed. Then up to ``wanted`` permits are taken: the first ``direct`` for
        requests about to be sent (they count for ``lease``), the others fetched ahead
        for jobs about to order (``lease + ahead``).
        """
        ids = [self._new_id() for _ in range(wanted)]
        # The line is kept for a process 5 % of a hold after it was told to come back.
        grace = self._us(0.05 * (self.window + self.margin))
        args: list[str | int] = [
            self._us(lease),
            self._us(ahead),
            len(releases),
            direct,
            self._name,
            grace,
        ]
        for release in releases:
            # Rounded down: Redis then dates the release no earlier than it happened.
            age = max(0, int(release.age / self._speed * _US))
            args += ["1" if release.sent else "0", age, release.id]
        args += ids
        granted, wait, paused, count, contended = await self._run(_SYNC, *args)
        return Synced(ids[:granted], wait, paused, count, contended)

    async def pause(self, seconds: float, *, limit: int, window: float) -> float:
        """Grant nothing for ``seconds`` + margin; keep the stricter of the rates. Returns
        the seconds everyone is paused from now."""
        _, _, paused, _, _ = await self._run(_PAUSE, self._us(seconds), limit, self._us(window))
        return paused

    async def _run(self, script: Script, *extra: str | int) -> tuple[int, float, float, int, bool]:
        args: list[str | int] = [
            self.limit,
            self._us(self.window),
            -1 if self._margin is None else self._us(self._margin),
            repr(DEFAULT_MARGIN_SHARE),
            self._epoch,
            self._new_id(),
            _STATE_TTL_MS,
            *extra,
        ]
        reply: list[Any] = await self._scripts.run(script, self.keys, args)
        result, wait_us, limit, window_us, _margin_us, raw_epoch, paused_us, count, busy = reply
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
        paused = self._seconds(int(paused_us))
        return int(result), self._seconds(int(wait_us)), paused, int(count), bool(int(busy))

    def _new_id(self) -> str:
        return f"{self._name}-{next(self._serial):x}"

    def _us(self, seconds: float) -> int:
        """Seconds of the caller's clock as integer microseconds of Redis' real clock."""
        return round(seconds / self._speed * _US)

    def _seconds(self, us: int) -> float:
        return us / _US * self._speed
