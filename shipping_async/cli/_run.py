"""The one run path of ``bulk`` and ``worker``: a :class:`RunPlan` built from the arguments at
the edge, and :func:`execute` that opens everything on one ``AsyncExitStack``, runs the
:class:`~shipping_async.bulk._runner.Runner`, prints the summary and returns the exit code.

What a run does, by its plan:

- ``bulk INPUT`` on a journal file: the shipments are fed to the runner as they are read
  (:class:`~shipping_async.bulk.BulkShipper`), results written as they finish.
- ``bulk INPUT --journal postgresql://...``: the shipments are enqueued, then the run
  drains the journal with any other workers, then reports the input's results.
- ``worker``: drains the journal until no job is left.

The exit codes (:func:`~shipping_async.cli._summary.exit_code`, re-exported here): 0 every
job (of the batch, or for a worker of the journal) done; 1 some failed, unknown or not
finished (the summary says how to continue); 2 bad arguments or setup; 130 interrupted.
Ctrl-C (or SIGTERM) stops gracefully; a second one aborts. The input's jobs come from
:mod:`~shipping_async.cli._inputs`, ``--reconcile FILE`` from
:mod:`~shipping_async.cli._settle_file`, the summaries from :mod:`~shipping_async.cli._summary`;
what a run opens first is :func:`~shipping_async.cli._opening.open_run`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any

from shipping_async.bulk.choice import EstimateChooser
from shipping_async.cli import _gc
from shipping_async.cli import _loop as event_loop
from shipping_async.cli._common import drain, showing, store_failure, store_failure_code
from shipping_async.cli._evidence import (
    POLL,
    WebhookPlan,
    open_evidence,
    print_report,
    settle_unknowns,
)
from shipping_async.cli._inputs import InputCheck, enqueue
from shipping_async.cli._opening import Opened, limiters, open_run
from shipping_async.cli._settle_file import settle_from_file
from shipping_async.cli._summary import (
    INCOMPLETE,
    INTERRUPTED,
    OK,
    SETUP,
    batch_summary,
    exit_code,
    journal_summary,
    report_batch,
    resume_command,
)
from shipping_async.cli._telemetry import configure_cli_logging
from shipping_async.cli._terminal import one_line, printable, without_password

__all__ = ["INCOMPLETE", "INTERRUPTED", "OK", "SETUP", "RunPlan", "execute", "exit_code"]

_log = logging.getLogger("shipping_async.cli")


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
        with _gc.long_run():
            return event_loop.run(_Execution(plan).main())
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
            run = await open_run(plan, stack)
            if run is None:
                return SETUP
            self.path = run.path
            _gc.freeze_start_up()  # what opening made lives as long as the run
            try:
                return await (self._feed(run) if plan.fed else self._drain(run))
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
        print(f"error: the journal failed mid-run: {one_line(failure)}", file=sys.stderr)
        _log.debug("the journal failed mid-run", exc_info=failure)
        if plan.fed:
            resume = resume_command(plan, self.path)
            print(f"shipments not finished; to continue: {resume}", flush=True)
        else:
            print(
                "jobs not finished; to continue, run a worker again: shipping-async worker "
                f"--journal {without_password(plan.journal or '')}",
                flush=True,
            )
        return store_failure_code(failure)

    def _display(self, progress: Any) -> Any:
        from shipping_async.cli._bulk_progress import make_display

        plan = self.plan
        return make_display(plan.progress, progress, limit=plan.limit, window_real=plan.window_real)

    # -- a batch fed as it is read ---------------------------------------------------------

    async def _feed(self, run: Opened) -> int:
        from shipping_async._client import AsyncShippingClient, token_from_environment
        from shipping_async.bulk.readers import count_rows
        from shipping_async.bulk.shipper import BulkShipper
        from shipping_async.scaleout.factory import close_limiter

        plan, journal = self.plan, run.journal
        limiter = limiters(self.plan, run.clock)("")
        run.stack.push_async_callback(close_limiter, limiter)
        environ = run.environ
        token = environ["SHIPPING_ACCESS_TOKEN"] if environ else token_from_environment() or ""
        client = AsyncShippingClient(
            token,
            base_url=run.base_url or os.environ.get("SHIPPING_BASE_URL", ""),
            order_limiter=limiter,
            clock=run.clock,
            timeout=plan.timeout,
            hooks=run.telemetry.hooks,
        )
        await run.stack.enter_async_context(client)
        if plan.reconcile or plan.resend_unknown:
            code = await settle_from_file(
                client, journal, path=plan.reconcile, resend_unknown=plan.resend_unknown
            )
            if code:
                return code
        reconciler = None
        if plan.webhook is not None:
            reconciler = await _webhook(run.stack, plan.webhook, journal, client, run.clock)
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
            inputs = InputCheck(plan.input)
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
                return await batch_summary(
                    journal,
                    plan,
                    self.path,
                    stopped=shipper.stopping,
                    bad=bad,
                    invalid=inputs.failed,
                )

    @staticmethod
    async def _settled(reconciler: Any) -> bool:
        """Settle unknown orders from evidence (waiting out their horizon); True when a
        job was settled or re-sent, so that another pass continues it."""
        report = await settle_unknowns(reconciler, asyncio.Event())
        print_report(report)
        return bool(report.settled or report.resent)

    # -- a shared journal drained with other workers ---------------------------------------

    async def _drain(self, run: Opened) -> int:
        from shipping_async.bulk.worker import Worker
        from shipping_async.scaleout.accounts import AccountClients, AccountConfigError

        plan, journal = self.plan, run.journal
        try:
            clients = AccountClients(
                limiters(self.plan, run.clock),
                config=plan.accounts,
                environ=run.environ,
                base_url=run.base_url,
                clock=run.clock,
                timeout=plan.timeout,
                hooks=run.telemetry.hooks,
            )
            run.stack.push_async_callback(clients.aclose)
            keys: list[str] | None = None
            if plan.command == "bulk":
                assert plan.input is not None
                keys = await enqueue(journal, plan.input)
            clients.check(await journal.accounts_with_work(retry_failed=plan.retry_failed))
        except (AccountConfigError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return SETUP
        reconciler = None
        if plan.webhook is not None:
            accounts = await journal.accounts_with_work(retry_failed=plan.retry_failed)
            client = clients.client(accounts[0] if accounts else "")
            reconciler = await _webhook(
                run.stack, plan.webhook, journal, client, run.clock, client_for=clients.client
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
                clock=run.clock,
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
            bad = await report_batch(journal, keys, out=plan.out)
        return await journal_summary(
            journal, plan, stopped=worker.stopping, bad=bad, batch=keys is not None
        )

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


async def _webhook(stack: contextlib.AsyncExitStack, *args: Any, **options: Any) -> Any:
    """:func:`open_evidence`, or ``None`` after saying why it failed (no traceback)."""
    from shipping_async.errors import ShippingError

    try:
        return await open_evidence(stack, *args, **options)
    except (OSError, ShippingError, ValueError) as exc:
        print(f"error: the webhook: {printable(exc)}", file=sys.stderr)
        return None
