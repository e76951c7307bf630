"""``shipping-async bulk``: ship a CSV or JSONL file of shipments, resumable, with progress.

Exit codes: 0 every shipment done; 1 some failed or have an unknown order outcome;
2 bad arguments or setup (no token, journal in use, journal holds another batch);
130 interrupted (Ctrl-C or SIGTERM): the journal is consistent, run again with
``--resume`` to continue.

Unknown order outcomes (POST /orders sent, no answer): such shipments are never sent
again on a guess. The API cannot search orders by reference, so find them in what you
know (the account's order list, your webhook receiver's ``order_received`` events) and
pass ``--reconcile FILE`` (CSV ``key,order_id``; an empty order_id means "no order was
created"). Each order id given is checked with GET /orders/{id} against the shipment's
customer_reference. ``--resend-unknown`` then declares every shipment still unknown as
not created and sends it again: use it only after that search.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import io
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from shipping_async.cli._common import (
    add_rate_options,
    add_shipping_options,
    drain,
    parse_rate,
    parse_speed,
    showing,
    store_failure,
    store_failure_code,
)
from shipping_async.cli._shared_run import add_scaleout_options, run_shared
from shipping_async.cli._telemetry import (
    RunTelemetry,
    add_telemetry_options,
    configure_cli_logging,
)
from shipping_async.scaleout.factory import close_limiter, is_shared_journal, open_limiter

__all__ = ["register", "run"]

DEFAULT_SANDBOX_SPEED = 60.0  # the API's 60 s window lasts 1 s: 60 shipments in ~3 s


def register(subparsers: Any) -> None:
    """Add the ``bulk`` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "bulk",
        help="quote, order, waybill and book pickups for a file of shipments",
        description=(
            "Ship every row of a CSV or JSONL file: quote, order (at the account's rate "
            "limit), waybill, pickup. Progress is journaled: after a crash or Ctrl-C, run "
            "again with --resume. The token comes from SHIPPING_ACCESS_TOKEN (or the file "
            "SHIPPING_ACCESS_TOKEN_FILE names)."
        ),
    )
    parser.add_argument("input", metavar="INPUT", help="shipments, .csv or .jsonl")
    parser.add_argument("--out", help="write one result per shipment (.jsonl or .csv)")
    parser.add_argument(
        "--journal",
        help="journal file (default INPUT.journal; a fresh temporary one with --sandbox), "
        "or postgresql://host/db[?schema=NAME] to enqueue for many workers and work too",
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue the batch the journal holds"
    )
    parser.add_argument(
        "--retry-failed",
        action="store_true",
        help="with --resume: try failed shipments marked retryable again (never re-orders)",
    )
    parser.add_argument("--reconcile", metavar="FILE", help="settle unknown orders: key,order_id")
    parser.add_argument(
        "--resend-unknown",
        action="store_true",
        help="declare every still-unknown order as never created and send it again",
    )
    parser.add_argument("--sandbox", action="store_true", help="run against an embedded sandbox")
    add_rate_options(
        parser,
        speed_help=f"sandbox clock speed (default {DEFAULT_SANDBOX_SPEED:g}); with --base-url: "
        "the external sandbox's speed: every duration of the run is scaled by it",
    )
    add_shipping_options(
        parser, concurrency=64, concurrency_help="shipments in flight (64)", progress="auto"
    )
    add_scaleout_options(parser)
    add_telemetry_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run the batch; returns the exit code."""
    from shipping_async.bulk.choice import parse_choice

    try:
        choose = parse_choice(args.choose)
        limit, window = _rate(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not Path(args.input).is_file():
        print(f"error: {args.input}: no such file", file=sys.stderr)
        return 2
    if is_shared_journal(args.journal):
        if args.sandbox or args.reconcile or args.resend_unknown:
            print(
                "error: a postgresql:// journal needs an external API (--base-url); settle "
                "unknown orders with shipping-async journal reconcile",
                file=sys.stderr,
            )
            return 2
        speed = _speed(args)
        return run_shared(
            args, choose=choose, limit=limit, window_real=window, speed=speed, enqueue=args.input
        )
    configure_cli_logging()
    try:
        return asyncio.run(_Command(args, choose, limit, window).main())
    except (KeyboardInterrupt, asyncio.CancelledError):  # the second Ctrl-C
        print("aborted; the journal is consistent: run again with --resume", file=sys.stderr)
        return 130


def _rate(args: argparse.Namespace) -> tuple[int, float]:
    """The order budget in real seconds."""
    return parse_rate(args, speed=_speed(args))


def _speed(args: argparse.Namespace) -> float:
    return parse_speed(args, default=DEFAULT_SANDBOX_SPEED if args.sandbox else 1.0)


class _Command:
    def __init__(self, args: argparse.Namespace, choose: Any, limit: int, window: float) -> None:
        self.args = args
        self.choose = choose
        self.limit = limit
        self.window_real = window

    async def main(self) -> int:
        from shipping_async._client import AsyncShippingClient, token_from_environment
        from shipping_async.bulk.journal import JournalError
        from shipping_async.bulk.sqlite_journal import SQLiteJournal
        from shipping_async.clock import Clock, ScaledClock, SystemClock

        args = self.args
        async with contextlib.AsyncExitStack() as stack:
            try:
                telemetry = RunTelemetry(args)
                await stack.enter_async_context(telemetry.serving())
            except ValueError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            clock: Clock = SystemClock()
            speed = _speed(args)
            if args.sandbox:
                from shipping_async.sandbox import SandboxServer

                sandbox = SandboxServer(speed=speed)
                await stack.enter_async_context(sandbox)
                base_url, token, clock = sandbox.base_url, sandbox.token, sandbox.clock
            else:
                base_url = args.base_url or os.environ.get("SHIPPING_BASE_URL", "")
                token = token_from_environment() or ""
                if not token or not base_url:
                    print(
                        "error: set SHIPPING_ACCESS_TOKEN and --base-url (or "
                        "SHIPPING_BASE_URL), or use --sandbox",
                        file=sys.stderr,
                    )
                    return 2
                if speed != 1.0:  # an external sandbox: run on its time, as workers do
                    clock = ScaledClock(speed)
            # The budget is in real seconds; the limiter runs on the client's clock.
            limiter = open_limiter(
                args.limiter,
                account="",
                limit=self.limit,
                window=self.window_real * speed,
                lease=1.5 * args.timeout * speed,
                clock=clock,
            )
            stack.push_async_callback(close_limiter, limiter)
            client = AsyncShippingClient(
                token,
                base_url=base_url,
                order_limiter=limiter,
                clock=clock,
                timeout=args.timeout,
                hooks=telemetry.hooks,
            )
            await stack.enter_async_context(client)
            path = self._journal_path(stack)
            try:
                journal = await SQLiteJournal.open(path, clock=clock)
            except JournalError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            stack.push_async_callback(journal.close)
            await stack.enter_async_context(telemetry.watching(journal))
            counts = await journal.counts()
            if sum(counts.values()) and not args.resume:
                print(
                    f"error: the journal {path} already holds {sum(counts.values())} shipments; "
                    "pass --resume to continue that batch, or --journal NEW for a new one",
                    file=sys.stderr,
                )
                return 2
            if args.reconcile or args.resend_unknown:
                code = await self._reconcile(client, journal)
                if code:
                    return code
            return await self._ship(client, journal, path)
        return 0  # pragma: no cover - the stack never swallows

    def _journal_path(self, stack: contextlib.AsyncExitStack) -> str:
        if self.args.journal:
            return str(self.args.journal)
        if self.args.sandbox:  # the embedded sandbox forgets everything: so does its journal
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="shipping-bulk-"))
            return str(Path(folder) / "batch.journal")
        return f"{self.args.input}.journal"

    async def _reconcile(self, client: Any, journal: Any) -> int:
        from shipping_async.errors import ShippingError

        unknown = {record.key: record for record in await journal.needs_reconciliation()}
        if self.args.reconcile:
            text = await asyncio.to_thread(Path(self.args.reconcile).read_text, "utf-8")
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
                    print(f"error: {self.args.reconcile}:{line}: {exc}", file=sys.stderr)
                    return 2
                reference = record.job.order.customer_reference
                if order.customer_reference not in (None, reference):
                    print(
                        f"error: {self.args.reconcile}:{line}: order {order.id} has "
                        f"customer_reference {order.customer_reference!r}, not {reference!r}",
                        file=sys.stderr,
                    )
                    return 2
                await journal.reconcile(key, order_id=order.id)
        if self.args.resend_unknown:
            for key in unknown:
                await journal.reconcile(key, order_id=None)
        return 0

    async def _ship(self, client: Any, journal: Any, path: str) -> int:
        from shipping_async.bulk.readers import count_rows, read_jobs
        from shipping_async.bulk.shipper import BulkShipper
        from shipping_async.cli._bulk_progress import make_display

        args = self.args
        shipper = BulkShipper(
            client,
            journal=journal,
            choose=self.choose,
            concurrency=args.concurrency,
            estimate_validity=args.estimate_validity,
            retry_failed=args.retry_failed,
        )
        display = make_display(
            args.progress, shipper.progress, limit=self.limit, window_real=self.window_real
        )
        try:
            with showing(display, shipper, total=count_rows(args.input)):
                bad = await drain(shipper.run(read_jobs(args.input)), display, out=args.out)
        except Exception as exc:  # the store gone mid-run: say what is left, no traceback
            failure = store_failure(exc)
            if failure is None:
                raise
            resume = f"shipping-async bulk {args.input} --journal {path} --resume"
            print(f"error: the journal failed mid-run: {failure}", file=sys.stderr)
            print(f"shipments not finished; to continue: {resume}", flush=True)
            return store_failure_code(failure)
        return await self._summary(journal, path, shipper.stopping, bad)

    async def _summary(self, journal: Any, path: str, stopped: bool, bad: int) -> int:
        from shipping_async.bulk.journal import FINISHED_STATES, JobState

        counts = await journal.counts()
        line = ", ".join(f"{state.value} {n}" for state, n in counts.items() if n)
        where = "temporary journal" if self.args.sandbox and not self.args.journal else path
        print(f"{where}: {line or 'empty'}", flush=True)
        resume = f"shipping-async bulk {self.args.input} --journal {path} --resume"
        if counts[JobState.UNKNOWN]:
            print(
                f"{counts[JobState.UNKNOWN]} order outcome(s) unknown: find them, then "
                f"{resume} --reconcile FILE (see shipping-async bulk --help)",
                flush=True,
            )
        if stopped:
            print(f"interrupted; to continue: {resume}", flush=True)
            return 130
        left = sum(n for state, n in counts.items() if state not in FINISHED_STATES)
        if left:  # let go unfinished (a lease lost, the store gone): never "all done"
            print(f"{left} shipment(s) not finished; to continue: {resume}", flush=True)
        return 1 if bad or left else 0
