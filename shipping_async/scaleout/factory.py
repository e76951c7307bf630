"""Journals and order limiters from the command line's ``--journal`` and ``--limiter`` values.

``--journal``:

- ``PATH`` (the default): a ``SQLiteJournal`` file, one process at a time.
- ``postgresql://host/db?schema=NAME``: a ``PostgresJournal`` many workers share.

``--limiter``:

- none or ``memory`` (the default): a ``RollingWindowLimiter`` in this process.
- ``redis://host:6379/0?prefix=NAME``: a ``RedisOrderLimiter`` per account, shared.

The drivers are imported only when a URL asks for them, so the single-machine defaults
need neither ``redis`` nor ``asyncpg``.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from shipping_async.bulk.journal import Journal
from shipping_async.clock import Clock
from shipping_async.limiter import OrderLimiter, RollingWindowLimiter

__all__ = ["close_limiter", "is_shared_journal", "open_journal", "open_limiter", "split_options"]

_POSTGRES = ("postgresql://", "postgres://")
_REDIS = ("redis://", "rediss://", "unix://")
#: The Redis name of the default account (``""``), which cannot be a hash tag.
DEFAULT_ACCOUNT_KEY = "default"


def is_shared_journal(spec: str | Path | None) -> bool:
    """Whether ``spec`` names a journal many workers share (a PostgreSQL URL)."""
    return isinstance(spec, str) and spec.startswith(_POSTGRES)


async def open_journal(
    spec: str | Path, *, clock: Clock | None = None, sent_marks: bool = False
) -> Journal:
    """Open the journal ``spec`` names; the caller closes it.

    A PostgreSQL URL may carry ``schema=NAME`` (default ``shipping_async``); the schema is
    created or migrated on the way. ``sent_marks``: a run that orders keeps this machine's
    sent marks for a PostgreSQL journal, in the directory the URL's ``sent_marks=DIR``
    names (``off``: none), by default ``$XDG_STATE_HOME/shipping-async/sent-marks``.
    """
    if is_shared_journal(spec):
        from shipping_async.scaleout._pg_sent_marks import default_directory
        from shipping_async.scaleout.postgres_journal import DEFAULT_SCHEMA, PostgresJournal

        dsn, options = split_options(str(spec), "schema", "sent_marks")
        marks_dir: str | Path | None = None
        if sent_marks and options.get("sent_marks") != "off":
            marks_dir = options.get("sent_marks") or default_directory()
        return await PostgresJournal.open(
            dsn,
            schema=options.get("schema", DEFAULT_SCHEMA),
            clock=clock,
            sent_marks=marks_dir,
        )
    from shipping_async.bulk.sqlite_journal import SQLiteJournal

    return await SQLiteJournal.open(spec, clock=clock)


def open_limiter(
    spec: str | None,
    *,
    account: str,
    limit: int = 20,
    window: float = 60.0,
    lease: float | None = None,
    clock: Clock | None = None,
) -> OrderLimiter:
    """The order limiter of ``account`` that ``spec`` names; close it with :func:`close_limiter`.

    ``window`` and ``lease`` are seconds of ``clock``. A Redis URL may carry
    ``prefix=NAME`` (default ``shipping``) to keep several deployments apart.
    """
    if spec is None or spec in ("", "memory"):
        return RollingWindowLimiter(limit, window, clock=clock)
    if spec.startswith(_REDIS):
        from shipping_async.scaleout.redis_limiter import RedisOrderLimiter

        url, options = split_options(spec, "prefix")
        return RedisOrderLimiter(
            url,
            account=account or DEFAULT_ACCOUNT_KEY,
            limit=limit,
            window=window,
            prefix=options.get("prefix", "shipping"),
            clock=clock,
            **({} if lease is None else {"lease": lease}),
        )
    raise ValueError(f"--limiter {spec!r}: expected 'memory' or a redis:// URL")


async def close_limiter(limiter: OrderLimiter) -> None:
    """Release what a limiter holds (a Redis connection pool, permits fetched ahead)."""
    aclose = getattr(limiter, "aclose", None)
    if aclose is not None:
        await aclose()


def split_options(url: str, *names: str) -> tuple[str, dict[str, str]]:
    """Take our own query parameters out of ``url``; the rest go to the driver."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    ours = {key: value for key, value in query if key in names}
    rest = [(key, value) for key, value in query if key not in names]
    return urlunsplit(parts._replace(query=urlencode(rest))), ours
