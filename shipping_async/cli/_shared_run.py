"""What ``worker`` and ``bulk --journal postgresql://...`` share: a worker run on a shared journal.

Builds the run from the command line: the clock (scaled for a sandbox), the journal, one
client and order limiter per account, the :class:`~shipping_async.bulk.worker.Worker`;
shows progress, writes results, prints the summary per account and the jobs to
reconcile. Ctrl-C (or SIGTERM) stops gracefully; a second one aborts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from typing import Any

from shipping_async.bulk.choice import EstimateChooser
from shipping_async.bulk.journal import FINISHED_STATES, JobState
from shipping_async.cli._common import drain, showing, store_failure, store_failure_code
from shipping_async.cli._telemetry import RunTelemetry, configure_cli_logging
from shipping_async.cli._terminal import printable
from shipping_async.clock import Clock, ScaledClock, SystemClock

__all__ = ["add_scaleout_options", "run_shared"]

#: Seconds one request may take (real); the limiter's lease is derived from it.
DEFAULT_TIMEOUT = 30.0


def add_scaleout_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--limiter``, ``--accounts``, ``--lease`` and ``--timeout`` to ``parser``."""
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


def run_shared(
    args: argparse.Namespace,
    *,
    choose: EstimateChooser,
    limit: int,
    window_real: float,
    speed: float,
    enqueue: str | None = None,
) -> int:
    """Work on the shared journal ``args.journal`` (after adding the jobs of ``enqueue``)."""
    configure_cli_logging()
    run = _SharedRun(args, choose, limit, window_real, speed)
    try:
        return asyncio.run(run.main(enqueue))
    except (KeyboardInterrupt, asyncio.CancelledError):  # the second Ctrl-C
        print(
            "aborted; the journal is consistent: others take this worker's jobs over after "
            "their lease",
            file=sys.stderr,
        )
        return 130


class _SharedRun:
    def __init__(
        self,
        args: argparse.Namespace,
        choose: EstimateChooser,
        limit: int,
        window_real: float,
        speed: float,
    ) -> None:
        self.args = args
        self.choose = choose
        self.limit = limit
        self.window_real = window_real
        self.speed = speed
        self.enqueued = False  # a bulk run: the batch, not the journal, decides the exit code

    async def main(self, enqueue: str | None) -> int:
        from shipping_async.bulk.journal import JournalError
        from shipping_async.bulk.worker import Worker
        from shipping_async.scaleout.accounts import AccountClients, AccountConfigError
        from shipping_async.scaleout.factory import open_journal, open_limiter

        args, speed = self.args, self.speed
        clock: Clock = ScaledClock(speed) if speed != 1.0 else SystemClock()
        if not args.limiter or args.limiter == "memory":
            print(
                "warning: --limiter memory keeps this worker's own order budget; run more "
                "than one worker per account only with --limiter redis://...",
                file=sys.stderr,
            )
        timeout = args.timeout

        def limiter_for(account: str) -> Any:
            return open_limiter(
                args.limiter,
                account=account,
                limit=self.limit,
                window=self.window_real * speed,
                lease=1.5 * timeout * speed,  # a request's longest life, on the clock
                clock=clock,
            )

        async with contextlib.AsyncExitStack() as stack:
            try:
                telemetry = RunTelemetry(args)
                await stack.enter_async_context(telemetry.serving())
            except ValueError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            try:
                journal: Any = await open_journal(args.journal, clock=clock)
            except (JournalError, OSError, ValueError) as exc:
                print(f"error: journal {_safe(args.journal)}: {exc}", file=sys.stderr)
                return 2
            stack.push_async_callback(journal.close)
            await stack.enter_async_context(telemetry.watching(journal))
            try:
                clients = AccountClients(
                    limiter_for,
                    config=args.accounts,
                    base_url=args.base_url,
                    clock=clock,
                    timeout=timeout,
                    hooks=telemetry.hooks,
                )
                stack.push_async_callback(clients.aclose)
                keys: list[str] | None = None
                if enqueue is not None:
                    keys = await self._enqueue(journal, enqueue)
                clients.check(await journal.accounts_with_work(retry_failed=args.retry_failed))
            except (AccountConfigError, ValueError) as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            worker = Worker(
                journal,
                clients.client,
                concurrency=args.concurrency,
                lease=args.lease,
                choose=self.choose,
                estimate_validity=args.estimate_validity,
                retry_failed=args.retry_failed,
                clock=clock,
            )
            self.enqueued = keys is not None
            try:
                bad = await self._work(worker, len(keys) if keys is not None else 0)
            except _Failed as failed:
                return failed.code
            if keys is not None:
                bad = await self._report_batch(journal, keys)
            return await self._summary(journal, worker.stopping, bad)
        return 0  # pragma: no cover - the stack never swallows

    async def _enqueue(self, journal: Any, path: str) -> list[str]:
        """Add the input's jobs to the journal (known keys keep their progress)."""
        from shipping_async.bulk.jobs import InvalidJob, ShipmentJob
        from shipping_async.bulk.readers import count_rows, read_jobs

        count_rows(path)  # a file that cannot be read stops here, before any job is added
        keys: list[str] = []
        chunk: list[ShipmentJob] = []
        invalid = 0
        for item in read_jobs(path):
            if isinstance(item, InvalidJob):
                invalid += 1
                line = f"failed {item.key} row={item.row} error={item.error}"
                print(printable(line), file=sys.stderr)
                continue
            chunk.append(item)
            if len(chunk) >= 500:
                keys += await self._add(journal, chunk)
                chunk = []
        keys += await self._add(journal, chunk)
        print(f"{len(keys)} shipments in the journal ({invalid} invalid rows)", flush=True)
        return keys

    @staticmethod
    async def _add(journal: Any, jobs: list[Any]) -> list[str]:
        keys = []
        for job, record in zip(jobs, await journal.add(jobs), strict=True):
            if record.job != job:
                print(
                    f"failed {printable(job.key)}: key already used by a different job",
                    file=sys.stderr,
                )
            else:
                keys.append(job.key)
        return keys

    async def _work(self, worker: Any, total: int) -> int:
        from shipping_async.cli._bulk_progress import make_display

        args = self.args
        display = make_display(
            args.progress, worker.progress, limit=self.limit, window_real=self.window_real
        )
        try:
            with showing(display, worker, total=total):
                return await drain(worker.run(), display, out=args.out if total == 0 else None)
        except Exception as exc:  # the store gone mid-run: say what is left, no traceback
            failure = store_failure(exc)
            if failure is None:
                raise
            print(f"error: the journal failed mid-run: {failure}", file=sys.stderr)
            print("jobs not finished; run a worker again to continue", flush=True)
            raise _Failed(store_failure_code(failure)) from None

    async def _report_batch(self, journal: Any, keys: list[str]) -> int:
        """After a bulk run: the input's results from the journal (others may have shipped
        some of them); the number not done."""
        from shipping_async.bulk.results import ShipmentResult

        wanted = set(keys)

        async def results() -> AsyncIterator[ShipmentResult]:
            async for record in journal.records():
                if record.key in wanted:
                    yield ShipmentResult.from_record(record)

        return await drain(results(), None, out=self.args.out)

    async def _summary(self, journal: Any, stopped: bool, bad: int) -> int:
        from shipping_async.cli.status import print_status

        await print_status(journal, sys.stdout)
        if stopped:
            print("stopped; run a worker again to continue", flush=True)
            return 130
        counts = await journal.counts()
        left = sum(n for state, n in counts.items() if state not in FINISHED_STATES)
        if left:  # claimed elsewhere and not finished yet, or let go by this worker
            print(
                f"{left} job(s) not finished; run a worker again to continue "
                f"(shipping-async worker --journal {_safe(self.args.journal)})",
                flush=True,
            )
        # 0 only when every job of the journal (or of the batch, for bulk) is done.
        not_done = bad if self.enqueued else sum(counts.values()) - counts[JobState.DONE]
        return 1 if not_done or left or counts[JobState.UNKNOWN] else 0


class _Failed(Exception):
    """The run ended because its store failed (already reported); ``code`` to exit with."""

    def __init__(self, code: int) -> None:
        self.code = code
        super().__init__(code)


def _safe(url: str) -> str:
    """A URL without its password, for messages."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return parts._replace(netloc=netloc).geturl()
    return url
