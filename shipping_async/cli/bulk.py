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
import dataclasses
import sys
from pathlib import Path
from typing import Any

from shipping_async.cli._options import add_run_options, run_plan
from shipping_async.cli._run import SETUP, RunPlan, execute

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
    add_run_options(
        parser,
        speed_help=f"sandbox clock speed (default {DEFAULT_SANDBOX_SPEED:g}); with --base-url: "
        "the external sandbox's speed: every duration of the run is scaled by it",
        concurrency=64,
        concurrency_help="shipments in flight (64)",
        progress="auto",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run the batch; returns the exit code."""
    try:
        if args.concurrency < 1 or args.max_in_flight < 1:
            raise ValueError("--concurrency and --max-in-flight must be >= 1")
        plan = _shared_plan(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return SETUP
    if not Path(args.input).is_file():
        print(f"error: {args.input}: no such file", file=sys.stderr)
        return SETUP
    if plan.shared and (args.sandbox or args.reconcile or args.resend_unknown):
        print(
            "error: a postgresql:// journal needs an external API (--base-url); settle "
            "unknown orders with shipping-async journal reconcile",
            file=sys.stderr,
        )
        return SETUP
    return execute(
        dataclasses.replace(
            plan,
            input=args.input,
            sandbox=args.sandbox,
            resume=args.resume,
            reconcile=args.reconcile,
            resend_unknown=args.resend_unknown,
        )
    )


def _shared_plan(args: argparse.Namespace) -> RunPlan:
    """The plan from the options ``bulk`` shares with ``worker``: the embedded sandbox runs
    :data:`DEFAULT_SANDBOX_SPEED` times faster unless ``--sandbox-speed`` says otherwise."""
    return run_plan("bulk", args, default_speed=DEFAULT_SANDBOX_SPEED if args.sandbox else 1.0)
