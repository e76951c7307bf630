"""The options ``bulk`` and ``worker`` share, and the :class:`~shipping_async.cli._run.RunPlan`
they make of them.

A command adds its own options (``bulk``: the input, ``--resume``...; ``worker``: its
required ``--journal``), then :func:`add_run_options`; its ``run`` turns the namespace into
a plan with :func:`run_plan` and hands it to :func:`~shipping_async.cli._run.execute`.
"""

from __future__ import annotations

import argparse
import math

from shipping_async.cli._evidence import add_webhook_options, webhook_plan
from shipping_async.cli._run import RunPlan
from shipping_async.cli._telemetry import add_telemetry_options

__all__ = ["DEFAULT_TIMEOUT", "add_run_options", "parse_rate", "parse_speed", "run_plan"]

#: Seconds one request may take (real); the limiter's lease is derived from it.
DEFAULT_TIMEOUT = 30.0


def add_scaleout_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--limiter``, ``--accounts``, ``--lease``, ``--timeout`` and ``--max-in-flight``."""
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
    parser.add_argument(
        "--max-in-flight",
        type=int,
        default=64,
        metavar="N",
        help="jobs doing requests at once across all accounts, first come first served "
        "(64: one core); --concurrency caps the jobs claimed per account",
    )
    parser.add_argument(
        "--max-store-outage",
        type=float,
        metavar="SECONDS",
        help="stop (exit 1, saying how to resume) when the journal's store stays unreachable "
        "this long (real seconds; default: wait for it forever, starting no new order)",
    )


def add_run_options(
    parser: argparse.ArgumentParser,
    *,
    speed_help: str,
    concurrency: int,
    concurrency_help: str,
    progress: str,
) -> None:
    """Add every option of a run: the API and its rate, shipping, scale-out, telemetry and
    webhook options. ``--out``, ``--journal`` and ``--retry-failed`` are the command's own
    (their help differs)."""
    add_rate_options(parser, speed_help=speed_help)
    add_shipping_options(
        parser, concurrency=concurrency, concurrency_help=concurrency_help, progress=progress
    )
    add_scaleout_options(parser)
    add_telemetry_options(parser)
    add_webhook_options(parser)


def run_plan(command: str, args: argparse.Namespace, *, default_speed: float = 1.0) -> RunPlan:
    """The plan of a run from the options :func:`add_run_options` added (and ``--journal``,
    ``--out``, ``--retry-failed``); a ``ValueError`` names the first bad option.

    ``default_speed``: the sandbox clock speed without ``--sandbox-speed``. The command
    sets its own fields with :func:`dataclasses.replace`.
    """
    from shipping_async.bulk.choice import parse_choice
    from shipping_async.scaleout.factory import is_shared_journal

    choose = parse_choice(args.choose)
    speed = parse_speed(args, default=default_speed)
    limit, window = parse_rate(args, speed=speed)
    webhook = webhook_plan(args)
    # Checked here for both commands, before anything opens: the runner would refuse
    # them too, but from inside the run, as a traceback.
    for option, seconds in (("--lease", args.lease), ("--timeout", args.timeout)):
        if not 0 < seconds < math.inf:
            raise ValueError(f"{option} must be a number of seconds > 0, got {seconds:g}")
    if args.max_store_outage is not None and args.max_store_outage <= 0:
        raise ValueError("--max-store-outage must be > 0")
    return RunPlan(
        command=command,
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


def add_shipping_options(
    parser: argparse.ArgumentParser, *, concurrency: int, concurrency_help: str, progress: str
) -> None:
    """Add ``--choose``, ``--concurrency``, ``--estimate-validity`` and ``--progress``."""
    parser.add_argument(
        "--choose",
        default="cheapest",
        help="cheapest | cheapest:CUR | carrier:NAME | service:NAME | carrier:N,service:S",
    )
    parser.add_argument("--concurrency", type=int, default=concurrency, help=concurrency_help)
    parser.add_argument(
        "--estimate-validity",
        type=float,
        metavar="SECONDS",
        help="re-quote estimates older than this instead of checking with GET /quotes",
    )
    parser.add_argument(
        "--progress", choices=("auto", "bar", "plain"), default=progress, help="display mode"
    )


def add_rate_options(parser: argparse.ArgumentParser, *, speed_help: str) -> None:
    """Add ``--base-url``, ``--sandbox-speed`` and ``--rate-limit``."""
    parser.add_argument("--base-url", help="API root incl. /client_api/v2 (or SHIPPING_BASE_URL)")
    parser.add_argument("--sandbox-speed", type=float, help=speed_help)
    parser.add_argument(
        "--rate-limit",
        metavar="N/SECONDS",
        help="order budget, real seconds (default 20/60; 20/(60/K) for a sandbox at speed K)",
    )


def parse_speed(args: argparse.Namespace, *, default: float = 1.0) -> float:
    """The sandbox's clock speed from ``--sandbox-speed`` (``default`` without it)."""
    speed = default if args.sandbox_speed is None else float(args.sandbox_speed)
    if speed <= 0:
        raise ValueError("--sandbox-speed must be > 0")
    return speed


def parse_rate(args: argparse.Namespace, *, speed: float) -> tuple[int, float]:
    """The order budget ``(limit, window in real seconds)``: ``--rate-limit``, else the
    API's 20 per 60 s on a sandbox clock running ``speed`` times faster."""
    if not args.rate_limit:
        return 20, 60.0 / speed
    count, sep, seconds = args.rate_limit.partition("/")
    try:
        limit, window = int(count), float(seconds)
    except ValueError:
        limit, window = 0, 0.0
    if not sep or limit < 1 or window <= 0:
        raise ValueError(f"--rate-limit {args.rate_limit!r}: expected N/SECONDS, e.g. 20/60")
    return limit, window
