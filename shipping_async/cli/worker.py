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

from shipping_async.cli._options import add_run_options, run_plan
from shipping_async.cli._run import SETUP, execute

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
    parser.add_argument("--out", help="write one result per job this worker finished")
    parser.add_argument(
        "--retry-failed", action="store_true", help="also retry failed jobs marked retryable"
    )
    add_run_options(
        parser,
        speed_help="the sandbox's clock speed: every duration of the run is scaled by it",
        concurrency=32,
        concurrency_help="jobs in flight per account",
        progress="plain",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Work until the journal's jobs are done; returns the exit code."""
    try:
        if args.concurrency < 1 or args.max_in_flight < 1:
            raise ValueError("--concurrency and --max-in-flight must be >= 1")
        plan = run_plan("worker", args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return SETUP
    return execute(plan)
