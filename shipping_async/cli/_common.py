"""What ``bulk`` and ``worker`` share: shipping and rate options, Ctrl-C handling, the ticker."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from collections.abc import AsyncIterable, Iterator
from typing import Any, Protocol

__all__ = [
    "add_rate_options",
    "add_scaleout_options",
    "add_shipping_options",
    "parse_rate",
    "parse_speed",
    "showing",
]

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Stoppable(Protocol):
    def stop(self) -> None: ...


def add_shipping_options(
    parser: argparse.ArgumentParser, *, concurrency: int, concurrency_help: str, progress: str
) -> None:
    """Add ``--choose``, ``--concurrency``, ``--estimate-validity`` and ``--progress``."""
    parser.add_argument(
        "--choose",
        default="cheapest",
        help="cheapest | cheapest:CUR | carrier:NAME | service:NAME | carrier:N,service:S",
    )
    parser.add_argument("--concurrency", type=int, default=concurrency, help=concurrency_help)
    parser.add_argument(
        "--estimate-validity",
        type=float,
        metavar="SECONDS",
        help="re-quote estimates older than this instead of checking with GET /quotes",
    )
    parser.add_argument(
        "--progress", choices=("auto", "bar", "plain"), default=progress, help="display mode"
    )


def add_rate_options(parser: argparse.ArgumentParser, *, speed_help: str) -> None:
    """Add ``--base-url``, ``--sandbox-speed`` and ``--rate-limit``."""
    parser.add_argument("--base-url", help="API root incl. /client_api/v2 (or SHIPPING_BASE_URL)")
    parser.add_argument("--sandbox-speed", type=float, help=speed_help)
    parser.add_argument(
        "--rate-limit",
        metavar="N/SECONDS",
        help="order budget, real seconds (default 20/60; 20/(60/K) for a sandbox at speed K)",
    )


def parse_speed(args: argparse.Namespace, *, default: float = 1.0) -> float:
    """The sandbox's clock speed from ``--sandbox-speed`` (``default`` without it)."""
    speed = default if args.sandbox_speed is None else float(args.sandbox_speed)
    if speed <= 0:
        raise ValueError("--sandbox-speed must be > 0")
    return speed


def parse_rate(args: argparse.Namespace, *, speed: float) -> tuple[int, float]:
    """The order budget ``(limit, window in real seconds)``: ``--rate-limit``, else the
    API's 20 per 60 s on a sandbox clock running ``speed`` times faster."""
    if not args.rate_limit:
        return 20, 60.0 / speed
    count, sep, seconds = args.rate_limit.partition("/")
    try:
        limit, window = int(count), float(seconds)
    except ValueError:
        limit, window = 0, 0.0
    if not sep or limit < 1 or window <= 0:
        raise ValueError(f"--rate-limit {args.rate_limit!r}: expected N/SECONDS, e.g. 20/60")
    return limit, window


@contextlib.contextmanager
def showing(display: Any, run: _Stoppable, *, total: int) -> Iterator[None]:
    """Show progress on ``display`` while the current task runs ``run``.

    The first Ctrl-C (or SIGTERM) stops ``run`` gracefully: no new orders, the ones sent
    finish. The second cancels the current task, which aborts the run.
    """
    loop = asyncio.get_running_loop()
    runner = asyncio.current_task()
    assert runner is not None
    interrupts = 0

    def interrupt() -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts == 1:
            run.stop()
            display.message(
                "stopping: no new orders; finishing the ones sent. Ctrl-C again aborts."
            )
        else:
            runner.cancel()

    for signum in _STOP_SIGNALS:
        loop.add_signal_handler(signum, interrupt)
    display.start(total)
    ticker = loop.create_task(_tick(display))
    try:
        yield
    finally:
        ticker.cancel()
        display.stop()
        for signum in _STOP_SIGNALS:
            loop.remove_signal_handler(signum)


async def _tick(display: Any) -> None:
    while True:
        display.tick()
        await asyncio.sleep(0.25)  # screen refresh, not a protocol duration


async def drain(results: AsyncIterable[Any], display: Any | None, *, out: str | None) -> int:
    """Show (with a display) and write (with ``out``) every result; returns how many did not
    finish done."""
    from shipping_async.bulk.results import ResultStatus, ResultWriter

    writer = ResultWriter(out) if out else None
    bad = 0
    try:
        async for result in results:
            bad += result.status is not ResultStatus.DONE
            if writer is not None:
                writer.write(result)
            if display is not None:
                display.result(result)
    finally:
        if writer is not None:
            writer.close()
    return bad


def store_failure_code(failure: BaseException) -> int:
    """The exit code of a run whose store failed: 2 when the journal holds data it cannot
    read (damaged, or another program's: a setup error, issue 15), else 1."""
    from shipping_async.bulk.journal import JournalDataError

    return 2 if isinstance(failure, JournalDataError) else 1


def store_failure(exc: BaseException) -> BaseException | None:
    """The journal's (or its connection's) error inside ``exc``, or ``None``.

    A run whose store fails mid-way ends with an error group from its task group; the
    command reports the error and the jobs left with how to continue, never a traceback
    (exit code: :func:`store_failure_code`).
    """
    from shipping_async.bulk._outage import unreachable
    from shipping_async.bulk.journal import JournalError

    if isinstance(exc, JournalError) or unreachable(exc):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = store_failure(inner)
            if found is not None:
                return found
    return None


#: Seconds one request may take (real); the limiter's lease is derived from it.
DEFAULT_TIMEOUT = 30.0


def add_scaleout_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--limiter``, ``--accounts``, ``--lease``, ``--timeout`` and ``--max-in-flight``."""
    parser.add_argument(
        "--limiter",
        metavar="URL",
        help="order budget store: 'memory' (this process, default) or redis://host:6379/0 "
        "(shared by every worker of an account; no order is sent while Redis is unreachable)",
    )
    parser.add_argument(
        "--accounts",
        metavar="FILE",
        help="TOML file naming each account's token variable or file and base URL "
        "(default: SHIPPING_ACCESS_TOKEN__<ACCOUNT>, SHIPPING_BASE_URL__<ACCOUNT>)",
    )
    parser.add_argument(
        "--lease",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="a claimed job stays this worker's that long without renewal (60; real "
        "seconds, never scaled by --sandbox-speed): others take over a dead worker's jobs "
        "after it",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"seconds one request may take ({DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--max-in-flight",
        type=int,
        default=64,
        metavar="N",
        help="jobs doing requests at once across all accounts, first come first served "
        "(64: one core); --concurrency caps the jobs claimed per account",
    )
    parser.add_argument(
        "--max-store-outage",
        type=float,
        metavar="SECONDS",
        help="stop (exit 1, saying how to resume) when the journal's store stays unreachable "
        "this long (real seconds; default: wait for it forever, starting no new order)",
    )
