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

from shipping_async.cli._shared_run import add_scaleout_options, run_shared

__all__ = ["add_rate_options", "parse_rate", "register", "run"]


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
    add_rate_options(parser)
    parser.add_argument("--out", help="write one result per job this worker finished")
    parser.add_argument(
        "--retry-failed", action="store_true", help="also retry failed jobs marked retryable"
    )
    parser.add_argument(
        "--choose",
        default="cheapest",
        help="cheapest | cheapest:CUR | carrier:NAME | service:NAME | carrier:N,service:S",
    )
    parser.add_argument("--concurrency", type=int, default=32, help="jobs in flight per account")
    parser.add_argument(
        "--estimate-validity",
        type=float,
        metavar="SECONDS",
        help="re-quote estimates older than this instead of checking with GET /quotes",
    )
    parser.add_argument(
        "--progress", choices=("auto", "bar", "plain"), default="plain", help="display mode"
    )
    parser.set_defaults(handler=run)


def add_rate_options(parser: argparse.ArgumentParser) -> None:
    """``--base-url``, ``--sandbox-speed`` and ``--rate-limit``, as ``bulk`` has them."""
    parser.add_argument("--base-url", help="API root incl. /client_api/v2 (or SHIPPING_BASE_URL)")
    parser.add_argument(
        "--sandbox-speed",
        type=float,
        help="the sandbox's clock speed: every duration of the run is scaled by it",
    )
    parser.add_argument(
        "--rate-limit",
        metavar="N/SECONDS",
        help="order budget, real seconds (default 20/60; 20/(60/K) for a sandbox at speed K)",
    )


def parse_rate(args: argparse.Namespace) -> tuple[int, float, float]:
    """``(limit, window in real seconds, speed)`` from the rate options."""
    speed = 1.0 if args.sandbox_speed is None else float(args.sandbox_speed)
    if speed <= 0:
        raise ValueError("--sandbox-speed must be > 0")
    if not args.rate_limit:
        return 20, 60.0 / speed, speed
    count, sep, seconds = args.rate_limit.partition("/")
    try:
        limit, window = int(count), float(seconds)
    except ValueError:
        limit, window = 0, 0.0
    if not sep or limit < 1 or window <= 0:
        raise ValueError(f"--rate-limit {args.rate_limit!r}: expected N/SECONDS, e.g. 20/60")
    return limit, window, speed


def run(args: argparse.Namespace) -> int:
    """Work until the journal's jobs are done; returns the exit code."""
    from shipping_async.bulk.choice import parse_choice

    try:
        choose = parse_choice(args.choose)
        limit, window, speed = parse_rate(args)
        if args.lease <= 0 or args.timeout <= 0 or args.concurrency < 1:
            raise ValueError("--lease and --timeout must be > 0, --concurrency >= 1")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return run_shared(args, choose=choose, limit=limit, window_real=window, speed=speed)
