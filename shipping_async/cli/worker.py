"""``shipping-async worker``: join the workers of a shared journal until its jobs are done.

Start as many as you like, on any hosts, with the same ``--journal`` and ``--limiter``::

    shipping-async worker --journal postgresql://db/shipping --limiter redis://cache:6379/0

Each claims jobs (of every account) from the journal, ships them and exits when no job
is left unfinished. A worker that dies leaves its jobs to the others after ``--lease``.
Exit codes: 0 all its jobs done; 1 some failed or need reconciliation (see
``shipping-async status``); 2 bad arguments or setup; 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
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


def register(subparsers: Any) -> None:
    """Add the ``worker`` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "worker",
        help="work on the jobs of a shared PostgreSQL journal, with other workers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--journal", required=True, help="the shared journal: postgresql://host/db[?schema=NAME]"
    )
    add_scaleout_options(parser)
    add_rate_options(
        parser, speed_help="the sandbox's clock speed: every duration of the run is scaled by it"
    )
    parser.add_argument("--out", help="write one result per job this worker finished")
    parser.add_argument(
        "--retry-failed", action="store_true", help="also retry failed jobs marked retryable"
    )
    add_shipping_options(
        parser, concurrency=32, concurrency_help="jobs in flight per account", progress="plain"
    )
    add_telemetry_options(parser)
    add_webhook_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Work until the journal's jobs are done; returns the exit code."""
    from shipping_async.bulk.choice import parse_choice
    from shipping_async.scaleout.factory import is_shared_journal

    try:
        choose = parse_choice(args.choose)
        speed = parse_speed(args)
        limit, window = parse_rate(args, speed=speed)
        if args.lease <= 0 or args.timeout <= 0 or args.concurrency < 1 or args.max_in_flight < 1:
            raise ValueError(
                "--lease and --timeout must be > 0, --concurrency and --max-in-flight >= 1"
            )
        webhook = webhook_plan(args)
        if args.max_store_outage is not None and args.max_store_outage <= 0:
            raise ValueError("--max-store-outage must be > 0")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return SETUP
    return execute(
        RunPlan(
            command="worker",
            args=args,
            choose=choose,
            limit=limit,
            window_real=window,
            speed=speed,
            journal=args.journal,
            out=args.out,
            shared=is_shared_journal(args.journal),
            retry_failed=args.retry_failed,
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
