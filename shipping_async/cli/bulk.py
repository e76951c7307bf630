"""``shipping-async bulk``: ship a CSV or JSONL file of shipments, resumable, with progress.

Exit codes: 0 every shipment done; 1 some failed, have an unknown order outcome or
are not finished (the summary names the resume command); 2 bad arguments or setup (no
token, journal in use, journal holds another batch); 130 interrupted (Ctrl-C or
SIGTERM): the journal is consistent, run again with ``--resume`` to continue. The run
itself is :func:`shipping_async.cli._run.execute`, the same path as ``worker``.

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
import sys
from pathlib import Path
from typing import Any

from shipping_async.cli._common import (
    add_rate_options,
    add_scaleout_options,
    add_shipping_options,
    parse_rate,
    parse_speed,
)
from shipping_async.cli._evidence import add_webhook_options, webhook_plan
from shipping_async.cli._run import SETUP, RunPlan, execute
from shipping_async.cli._telemetry import add_telemetry_options

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
            "again with --resume. The token comes from SHIPPING_ACCESS_TOKEN."
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
    add_webhook_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run the batch; returns the exit code."""
    from shipping_async.bulk.choice import parse_choice
    from shipping_async.scaleout.factory import is_shared_journal

    try:
        choose = parse_choice(args.choose)
        speed = parse_speed(args, default=DEFAULT_SANDBOX_SPEED if args.sandbox else 1.0)
        limit, window = _rate(args)
        if args.concurrency < 1 or args.max_in_flight < 1:
            raise ValueError("--concurrency and --max-in-flight must be >= 1")
        webhook = webhook_plan(args)
        if args.max_store_outage is not None and args.max_store_outage <= 0:
            raise ValueError("--max-store-outage must be > 0")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return SETUP
    if not Path(args.input).is_file():
        print(f"error: {args.input}: no such file", file=sys.stderr)
        return SETUP
    shared = is_shared_journal(args.journal)
    if shared and (args.sandbox or args.reconcile or args.resend_unknown):
        print(
            "error: a postgresql:// journal needs an external API (--base-url); settle "
            "unknown orders with shipping-async journal reconcile",
            file=sys.stderr,
        )
        return SETUP
    return execute(
        RunPlan(
            command="bulk",
            args=args,
            choose=choose,
            limit=limit,
            window_real=window,
            speed=speed,
            journal=args.journal,
            input=args.input,
            out=args.out,
            shared=shared,
            sandbox=args.sandbox,
            resume=args.resume,
            retry_failed=args.retry_failed,
            reconcile=args.reconcile,
            resend_unknown=args.resend_unknown,
            base_url=args.base_url,
            limiter=args.limiter,
            accounts=args.accounts,
            lease=args.lease,
            timeout=args.timeout,
            max_store_outage=args.max_store_outage,
            concurrency=args.concurrency,
            max_in_flight=args.max_in_flight,
            estimate_validity=args.estimate_validity,
            webhook=webhook,
            progress=args.progress,
        )
    )


def _rate(args: argparse.Namespace) -> tuple[int, float]:
    """The order budget ``(limit, window in real seconds)`` the options give."""
    speed = parse_speed(args, default=DEFAULT_SANDBOX_SPEED if args.sandbox else 1.0)
    return parse_rate(args, speed=speed)
