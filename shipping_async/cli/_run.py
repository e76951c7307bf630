"""The one run path of ``bulk`` and ``worker``: a :class:`RunPlan` built from the arguments at
the edge, and :func:`execute` that opens everything on one ``AsyncExitStack``, runs the
:class:`~shipping_async.bulk._runner.Runner`, prints the summary and returns the exit code.

What a run does, by its plan:

- ``bulk INPUT`` on a journal file: the shipments are fed to the runner as they are read
  (:class:`~shipping_async.bulk.BulkShipper`), results written as they finish.
- ``bulk INPUT --journal postgresql://...``: the shipments are enqueued, then the run
  drains the journal with any other workers, then reports the input's results.
- ``worker``: drains the journal until no job is left.

The one exit-code table (:func:`exit_code`): 0 every job (of the batch, or for a worker
of the journal) done; 1 some failed, unknown or not finished (the summary says how to
continue); 2 bad arguments or setup; 130 interrupted. Ctrl-C (or SIGTERM) stops
gracefully; a second one aborts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import io
import logging
import os
import shlex
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipping_async.bulk.choice import EstimateChooser
from shipping_async.bulk.journal import FINISHED_STATES, JobState
from shipping_async.cli._common import drain, showing, store_failure, store_failure_code
from shipping_async.cli._evidence import (
    POLL,
    WebhookPlan,
    open_evidence,
    print_report,
    settle_unknowns,
)
from shipping_async.cli._telemetry import RunTelemetry, configure_cli_logging
from shipping_async.cli._terminal import printable
from shipping_async.clock import Clock, ScaledClock, SystemClock

__all__ = ["INCOMPLETE", "INTERRUPTED", "OK", "SETUP", "RunPlan", "execute", "exit_code"]

_log = logging.getLogger("shipping_async.cli")

OK, INCOMPLETE, SETUP, INTERRUPTED = 0, 1, 2, 130


def exit_code(*, stopped: bool, not_done: int) -> int:
    """The one exit-code table of ``bulk`` and ``worker`` (setup errors are ``SETUP``)."""
    if stopped:
        return INTERRUPTED
    return INCOMPLETE if not_done else OK


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    """Everything a run needs, decided from the command line before anything opens."""

    command: str  # "bulk" or "worker"
    args: argparse.Namespace  # the telemetry options, as given
    choose: EstimateChooser
    limit: int
    window_real: float
    speed: float
    journal: str | None
    input: str | None = None
    out: str | None = None
    shared: bool = False  # a journal many processes share (PostgreSQL)
    sandbox: bool = False
    resume: bool = False
    retry_failed: bool = False
    reconcile: str | None = None
    resend_unknown: bool = False
    base_url: str | None = None
    limiter: str | None = None
    accounts: str | None = None
    lease: float = 60.0
    timeout: float = 30.0
    max_store_outage: float | None = None  # real seconds; None: wait for the store forever
    concurrency: int = 32
    max_in_flight: int = 64
    estimate_validity: float | None = None
    progress: str = "plain"
    webhook: WebhookPlan | None = None  # --webhook-listen/--webhook-url: settle unknowns

    @property
    def fed(self) -> bool:
        """A batch fed to the runner as it is read (bulk on a journal file)."""
        return self.command == "bulk" and not self.shared


def execute(plan: RunPlan) -> int:
    """Run ``plan``; returns the exit code."""
    configure_cli_logging()
    # SHIPPING_LOG=debug from the start: a journal that fails to open shows its traceback.
    from shipping_async._http import configure_logging

    configure_logging()
    try:
        return asyncio.run(_Execution(plan).main())
    except (KeyboardInterrupt, asyncio.CancelledError):  # the second Ctrl-C
        if plan.shared:
            print(
                "aborted; the journal is consistent: others take this worker's jobs over "
                "after their lease",
                file=sys.stderr,
            )
        else:
            print("aborted; the journal is consistent: run again with --resume", file=sys.stderr)
        return INTERRUPTED


class _Failed(Exception):
    """The run ended because its store failed (already reported); ``code`` to exit with."""

    def __init__(self, code: int) -> None:
        self.code = code
        super().__init__(code)


class _Execution:
    def __init__(self, plan: RunPlan) -> None:
        self.plan = plan
        self.path = ""  # the journal file of a fed run

    async def main(self) -> int:
        plan = self.plan
        async with contextlib.AsyncExitStack() as stack:
            try:
                telemetry = RunTelemetry(plan.args)
                await stack.enter_async_context(telemetry.serving())
            except ValueError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return SETUP
            opened = await self._open_api(stack)
            if opened is None:
                return SETUP
            clock, base_url, environ = opened
            journal = await self._open_journal(stack, clock)
            if journal is None:
                return SETUP
            await stack.enter_async_context(telemetry.watching(journal))
            try:
                if plan.fed:
                    return await self._feed(stack, journal, clock, base_url, environ, telemetry)
                return await self._drain(stack, journal, clock, base_url, environ, telemetry)
            except _Failed as failed:
                return failed.code
            except Exception as exc:  # the store failed outside the runner (settling, summary)
                failure = store_failure(exc)
                if failure is None:
                    raise
                return self._store_failed(failure)
        return OK  # pragma: no cover - the stack never swallows

    def _store_failed(self, failure: BaseException) -> int:
        """Say (one line, no traceback) that the store failed and how to continue; the
        exit code."""
        plan = self.plan
        print(f"error: the journal failed mid-run: {_one_line(failure)}", file=sys.stderr)
        _log.debug("the journal failed mid-run", exc_info=failure)
        if plan.fed:
            print(f"shipments not finished; to continue: {self._resume()}", flush=True)
        else:
            print(
                "jobs not finished; to continue, run a worker again: shipping-async worker "
                f"--journal {_safe(plan.journal or '')}",
                flush=True,
            )
        return store_failure_code(failure)

    # -- opening ---------------------------------------------------------------------------

    async def _open_api(
        self, stack: contextlib.AsyncExitStack
    ) -> tuple[Clock, str | None, dict[str, str] | None] | None:
        """The clock, base URL and (for an embedded sandbox) the environment of tokens."""
        plan = self.plan
        if plan.sandbox:
            from shipping_async.sandbox import SandboxServer

            sandbox = SandboxServer(speed=plan.speed)
            await stack.enter_async_context(sandbox)
            return sandbox.clock, sandbox.base_url, {"SHIPPING_ACCESS_TOKEN": sandbox.token}
        if plan.fed:
            from shipping_async._client import token_from_environment

            base_url = plan.base_url or os.environ.get("SHIPPING_BASE_URL", "")
            if not token_from_environment() or not base_url:
                print(
                    "error: set SHIPPING_ACCESS_TOKEN (or SHIPPING_ACCESS_TOKEN_FILE) and "
                    "--base-url (or SHIPPING_BASE_URL), "
                    "or use --sandbox",
                    file=sys.stderr,
                )
                return None
        elif not plan.limiter or plan.limiter == "memory":
            print(
                "warning: --limiter memory keeps this worker's own order budget; run more "
                "than one worker per account only with --limiter redis://...",
                file=sys.stderr,
            )
        # An external sandbox: the run goes on its time.
        clock: Clock = ScaledClock(plan.speed) if plan.speed != 1.0 else SystemClock()
        return clock, plan.base_url, None

    async def _open_journal(self, stack: contextlib.AsyncExitStack, clock: Clock) -> Any:
        from shipping_async.bulk._outage import steady, unreachable
        from shipping_async.bulk.journal import JournalError
        from shipping_async.scaleout.factory import open_journal

        plan = self.plan
        spec = plan.journal if plan.shared else self._journal_path(stack)
        assert spec is not None
        try:
            store: Any = await open_journal(spec, clock=clock)
        except Exception as exc:
            if not isinstance(exc, JournalError | OSError | ValueError) and not unreachable(exc):
                raise
            shown = _safe(spec) if plan.shared else spec
            print(f"error: journal {shown}: {_one_line(exc)}", file=sys.stderr)
            _log.debug("opening the journal failed", exc_info=True)
            return None
        stack.push_async_callback(store.close)
        # Every operation of the run waits out a lost connection (up to --max-store-outage).
        journal = steady(store, max_outage=plan.max_store_outage)
        if plan.fed:
            held = sum((await journal.counts()).values())
            if held and not plan.resume:
                print(
                    f"error: the journal {spec} already holds {held} shipments; pass "
                    "--resume to continue that batch, or --journal NEW for a new one",
                    file=sys.stderr,
                )
                return None
        return journal

    def _journal_path(self, stack: contextlib.AsyncExitStack) -> str:
        plan = self.plan
        if plan.journal:
            self.path = str(plan.journal)
        elif plan.sandbox:  # the embedded sandbox forgets everything: so does its journal
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="shipping-bulk-"))
            self.path = str(Path(folder) / "batch.journal")
        else:
            self.path = f"{plan.input}.journal"
        return self.path

    def _limiter_for(self, clock: Clock) -> Any:
        from shipping_async.scaleout.factory import open_limiter

        plan = self.plan

        def limiter_for(account: str) -> Any:
            # The budget is in real seconds; the limiter runs on the clients' clock.
            return open_limiter(
                plan.limiter,
                account=account,
                limit=plan.limit,
                window=plan.window_real * plan.speed,
                lease=1.5 * plan.timeout * plan.speed,  # a request's longest life, on the clock
                clock=clock,
            )

        return limiter_for

    def _display(self, progress: Any) -> Any:
        from shipping_async.cli._bulk_progress import make_display

        plan = self.plan
        return make_display(plan.progress, progress, limit=plan.limit, window_real=plan.window_real)

    # -- a batch fed as it is read ---------------------------------------------------------

    async def _feed(
        self,
        stack: contextlib.AsyncExitStack,
        journal: Any,
        clock: Clock,
        base_url: str | None,
        environ: dict[str, str] | None,
        telemetry: RunTelemetry,
    ) -> int:
        from shipping_async._client import AsyncShippingClient, token_from_environment
        from shipping_async.bulk.readers import count_rows
        from shipping_async.bulk.shipper import BulkShipper
        from shipping_async.scaleout.factory import close_limiter

        plan = self.plan
        limiter = self._limiter_for(clock)("")
        stack.push_async_callback(close_limiter, limiter)
        token = environ["SHIPPING_ACCESS_TOKEN"] if environ else token_from_environment() or ""
        client = AsyncShippingClient(
            token,
            base_url=base_url or os.environ.get("SHIPPING_BASE_URL", ""),
            order_limiter=limiter,
            clock=clock,
            timeout=plan.timeout,
            hooks=telemetry.hooks,
        )
        await stack.enter_async_context(client)
        if plan.reconcile or plan.resend_unknown:
            code = await self._reconcile(client, journal)
            if code:
                return code
        reconciler = None
        if plan.webhook is not None:
            reconciler = await _webhook(stack, plan.webhook, journal, client, clock)
            if reconciler is None:
                return SETUP
        assert plan.input is not None
        while True:  # a pass more after unknown orders were settled from evidence
            shipper = BulkShipper(
                client,
                journal=journal,
                choose=plan.choose,
                concurrency=plan.concurrency,
                estimate_validity=plan.estimate_validity,
                retry_failed=plan.retry_failed,
                lease=plan.lease,
            )
            display = self._display(shipper.progress)
            inputs = _InputCheck(plan.input)
            try:
                with showing(display, shipper, total=count_rows(plan.input)):
                    results = inputs.counted(shipper.run(inputs.jobs()))
                    bad = await drain(results, display, out=plan.out)
            except Exception as exc:  # the store gone mid-run: say what is left, no traceback
                failure = store_failure(exc)
                if failure is None:
                    raise
                return self._store_failed(failure)
            if reconciler is None or shipper.stopping or not await self._settled(reconciler):
                return await self._batch_summary(
                    journal, shipper.stopping, bad, invalid=inputs.failed
                )

    @staticmethod
    async def _settled(reconciler: Any) -> bool:
        """Settle unknown orders from evidence (waiting out their horizon); True when a
        job was settled or re-sent, so that another pass continues it."""
        report = await settle_unknowns(reconciler, asyncio.Event())
        print_report(report)
        return bool(report.settled or report.resent)

    def _resume(self) -> str:
        """The command that continues this batch: the same words, with the journal named
        and ``--resume`` (flags in their ``--name=value`` form too)."""
        plan = self.plan
        words = list(getattr(plan.args, "argv", None) or ["bulk", plan.input or ""])
        words = [word for word in words if word != "--resume"]
        if not any(word == "--journal" or word.startswith("--journal=") for word in words):
            words += ["--journal", self.path]
        return shlex.join(["shipping-async", *words, "--resume"])

    async def _reconcile(self, client: Any, journal: Any) -> int:
        from shipping_async.errors import ShippingError

        unknown = {record.key: record for record in await journal.needs_reconciliation()}
        if self.plan.reconcile:
            text = await asyncio.to_thread(Path(self.plan.reconcile).read_text, "utf-8")
            for line, row in enumerate(csv.DictReader(io.StringIO(text)), start=2):
                key = (row.get("key") or "").strip()
                order_text = (row.get("order_id") or "").strip().lower()
                record = unknown.pop(key, None)
                if record is None:
                    continue  # not unknown (any more): nothing to settle
                if order_text in ("", "none"):
                    await journal.reconcile(key, order_id=None)
                    continue
                try:
                    order = await client.orders.get(int(order_text))
                except (ValueError, ShippingError) as exc:
                    print(f"error: {self.plan.reconcile}:{line}: {printable(exc)}", file=sys.stderr)
                    return 2
                reference = record.job.order.customer_reference
                if order.customer_reference not in (None, reference):
                    print(
                        f"error: {self.plan.reconcile}:{line}: order {order.id} has "
                        f"customer_reference {order.customer_reference!r}, not {reference!r}",
                        file=sys.stderr,
                    )
                    return 2
                await journal.reconcile(key, order_id=order.id)
        if self.plan.resend_unknown:
            for key in unknown:
                await journal.reconcile(key, order_id=None)
        return 0

    async def _batch_summary(
        self, journal: Any, stopped: bool, bad: int, *, invalid: int = 0
    ) -> int:
        plan = self.plan
        counts = await journal.counts()
        line = ", ".join(f"{state.value} {n}" for state, n in counts.items() if n)
        if invalid:  # rows that never became jobs (bad fields, a key used twice)
            line = f"{line}, invalid input {invalid}" if line else f"invalid input {invalid}"
        where = "temporary journal" if plan.sandbox and not plan.journal else self.path
        print(f"{where}: {line or 'empty'}", flush=True)
        left = sum(n for state, n in counts.items() if state not in FINISHED_STATES)
        ordered = sum(counts[state] for state in _PAST_THE_ORDER)
        if plan.sandbox and (stopped or left) and (not plan.journal or ordered):
            # The embedded sandbox's orders are gone with this process: a job past its
            # order cannot go on in a new one, and a temporary journal is gone too.
            why = (
                "its journal was temporary (add --journal FILE to keep one)"
                if not plan.journal
                else f"{ordered} of its shipments were ordered in that sandbox"
            )
            print(
                "the embedded sandbox ended with this run, so this batch cannot be resumed: "
                f"{why}; run the batch again",
                flush=True,
            )
            return exit_code(stopped=stopped, not_done=bad + left)
        if counts[JobState.UNKNOWN]:
            print(
                f"{counts[JobState.UNKNOWN]} order outcome(s) unknown: find them, then "
                f"{self._resume()} --reconcile FILE (see shipping-async bulk --help)",
                flush=True,
            )
        if stopped:
            print(f"interrupted; to continue: {self._resume()}", flush=True)
        left = sum(n for state, n in counts.items() if state not in FINISHED_STATES)
        if left and not stopped:  # let go unfinished (a lease lost): never "all done"
            print(f"{left} shipment(s) not finished; to continue: {self._resume()}", flush=True)
        return exit_code(stopped=stopped, not_done=bad + left)

    # -- a shared journal drained with other workers ---------------------------------------

    async def _drain(
        self,
        stack: contextlib.AsyncExitStack,
        journal: Any,
        clock: Clock,
        base_url: str | None,
        environ: dict[str, str] | None,
        telemetry: RunTelemetry,
    ) -> int:
        from shipping_async.bulk.worker import Worker
        from shipping_async.scaleout.accounts import AccountClients, AccountConfigError

        plan = self.plan
        try:
            clients = AccountClients(
                self._limiter_for(clock),
                config=plan.accounts,
                environ=environ,
                base_url=base_url,
                clock=clock,
                timeout=plan.timeout,
                hooks=telemetry.hooks,
            )
            stack.push_async_callback(clients.aclose)
            keys: list[str] | None = None
            if plan.command == "bulk":
                assert plan.input is not None
                keys = await self._enqueue(journal, plan.input)
            clients.check(await journal.accounts_with_work(retry_failed=plan.retry_failed))
        except (AccountConfigError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return SETUP
        reconciler = None
        if plan.webhook is not None:
            accounts = await journal.accounts_with_work(retry_failed=plan.retry_failed)
            client = clients.client(accounts[0] if accounts else "")
            reconciler = await _webhook(
                stack, plan.webhook, journal, client, clock, client_for=clients.client
            )
            if reconciler is None:
                return SETUP
        while True:  # a pass more after unknown orders were settled from evidence
            worker = Worker(
                journal,
                clients.client,
                concurrency=plan.concurrency,
                max_in_flight=plan.max_in_flight,
                lease=plan.lease,
                choose=plan.choose,
                estimate_validity=plan.estimate_validity,
                retry_failed=plan.retry_failed,
                clock=clock,
            )
            stop = asyncio.Event()
            side = None
            if reconciler is not None:  # settles while the worker drains (it continues them)
                side = asyncio.create_task(reconciler.run_forever(stop, every=POLL))
            try:
                bad = await self._work(worker, len(keys) if keys is not None else 0)
            except BaseException:
                stop.set()
                if side is not None:  # the run's own failure is the one to report
                    await asyncio.gather(side, return_exceptions=True)
                raise
            stop.set()
            if side is not None:
                await side  # its store failing (too long away) ends the run like the worker's
            if reconciler is None or worker.stopping:
                break
            if not await self._settled(reconciler) and not await journal.accounts_with_work(
                retry_failed=plan.retry_failed
            ):
                break
        if keys is not None:
            bad = await self._report_batch(journal, keys)
        return await self._journal_summary(journal, worker.stopping, bad, batch=keys is not None)

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
        plan = self.plan
        display = self._display(worker.progress)
        try:
            with showing(display, worker, total=total):
                return await drain(worker.run(), display, out=plan.out if total == 0 else None)
        except Exception as exc:  # the store gone mid-run: say what is left, no traceback
            failure = store_failure(exc)
            if failure is None:
                raise
            raise _Failed(self._store_failed(failure)) from None

    async def _report_batch(self, journal: Any, keys: list[str]) -> int:
        """After a bulk run: the input's results from the journal (others may have shipped
        some of them); the number not done."""
        from shipping_async.bulk.results import ShipmentResult

        wanted = set(keys)

        async def results() -> AsyncIterator[ShipmentResult]:
            async for record in journal.records():
                if record.key in wanted:
                    yield ShipmentResult.from_record(record)

        return await drain(results(), None, out=self.plan.out)

    async def _journal_summary(self, journal: Any, stopped: bool, bad: int, *, batch: bool) -> int:
        from shipping_async.cli.status import print_status

        await print_status(journal, sys.stdout)
        if stopped:
            print("stopped; run a worker again to continue", flush=True)
            return INTERRUPTED
        counts = await journal.counts()
        left = sum(n for state, n in counts.items() if state not in FINISHED_STATES)
        if left:  # claimed elsewhere and not finished yet, or let go by this worker
            journal_url = _safe(self.plan.journal or "")
            print(
                f"{left} job(s) not finished; run a worker again to continue "
                f"(shipping-async worker --journal {journal_url})",
                flush=True,
            )
        # 0 only when every job of the journal (or of the batch, for bulk) is done.
        not_done = bad if batch else sum(counts.values()) - counts[JobState.DONE]
        return exit_code(stopped=False, not_done=not_done + left + counts[JobState.UNKNOWN])


def _one_line(exc: BaseException) -> str:
    """An error for one line of a terminal: its text (or type), escaped and capped."""
    return printable(str(exc)[:300] or type(exc).__name__)


async def _webhook(stack: contextlib.AsyncExitStack, *args: Any, **options: Any) -> Any:
    """:func:`open_evidence`, or ``None`` after saying why it failed (no traceback)."""
    from shipping_async.errors import ShippingError

    try:
        return await open_evidence(stack, *args, **options)
    except (OSError, ShippingError, ValueError) as exc:
        print(f"error: the webhook: {printable(exc)}", file=sys.stderr)
        return None


def _safe(url: str) -> str:
    """A URL without its password, for messages."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return parts._replace(netloc=netloc).geturl()
    return url


#: Unfinished states whose order exists (or may): they go on only where it was created.
_PAST_THE_ORDER = (JobState.ORDERING, JobState.ORDERED, JobState.WAYBILLED, JobState.UNKNOWN)


class _InputCheck:
    """The input's jobs, with a key used twice refused naming both lines, and the count
    of rows that never became jobs (for the summary)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.failed = 0
        self._lines: dict[str, int] = {}

    def jobs(self) -> Any:
        from shipping_async.bulk.jobs import InvalidJob
        from shipping_async.bulk.readers import read_numbered_jobs

        for line, item in read_numbered_jobs(self.path):
            first = self._lines.setdefault(item.key, line)
            if first != line and not isinstance(item, InvalidJob):
                item = InvalidJob(
                    key=item.key,
                    row=line,
                    error=f"key {item.key!r} appears twice in the input, on lines {first} "
                    f"and {line}; each job needs its own",
                )
            yield item

    async def counted(self, results: AsyncIterator[Any]) -> AsyncIterator[Any]:
        from shipping_async.bulk.results import ResultStatus, Stage

        async for result in results:
            if result.stage is Stage.INPUT and result.status is ResultStatus.FAILED:
                self.failed += 1
            yield result
