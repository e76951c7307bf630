"""What the runs of ``bulk`` and ``worker`` share: Ctrl-C handling, the ticker, draining results,
and telling a failed store apart (their options are in :mod:`shipping_async.cli._options`)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterable, Iterator
from typing import Any, Protocol

__all__ = ["drain", "showing", "store_failure", "store_failure_code"]

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Stoppable(Protocol):
    def stop(self) -> None: ...


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
