"""``shipping-async reconcile``: settle unknown orders once, from the journal's evidence.

Reads every ``UNKNOWN`` job of the journal and the ``order_received`` events a run with
``--webhook-listen`` (or your own receiver, through ``reconcile()``) recorded there;
``GET /orders/{id}`` of each candidate decides (see ``shipping_async.bulk.reconcile``).
Prints each job settled (it continues with waybill and pickup at the next run) and each
job still unknown with its evidence. ``--resend-unknown-after-silence`` also sends again
the jobs whose silence is proven; without it nothing is re-sent.

Exit codes: 0 no unknown job left; 1 some left; 2 setup error.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from shipping_async.cli._terminal import printable

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``reconcile`` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "reconcile",
        help="settle unknown orders once from the order_received events in the journal",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--journal", required=True, help="postgresql://host/db[?schema=NAME] or a journal file"
    )
    parser.add_argument("--base-url", help="the API (default: $SHIPPING_BASE_URL)")
    parser.add_argument(
        "--sandbox-speed",
        type=float,
        default=1.0,
        help="the API's clock speed (a scaled sandbox)",
    )
    parser.add_argument(
        "--webhook-id", type=int, help="the webhook whose status must be active for silence"
    )
    parser.add_argument(
        "--resend-unknown-after-silence",
        action="store_true",
        help="send again the jobs whose silence is proven (default: only report it)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Reconcile once; returns the exit code."""
    from shipping_async._client import token_from_environment

    base_url = args.base_url or os.environ.get("SHIPPING_BASE_URL", "")
    token = token_from_environment()
    if not token or not base_url:
        print(
            "error: set SHIPPING_ACCESS_TOKEN (or SHIPPING_ACCESS_TOKEN_FILE) and --base-url "
            "(or SHIPPING_BASE_URL)",
            file=sys.stderr,
        )
        return 2
    if not args.sandbox_speed > 0:
        print("error: --sandbox-speed must be > 0", file=sys.stderr)
        return 2
    return asyncio.run(_main(args, token, base_url))


async def _main(args: argparse.Namespace, token: str, base_url: str) -> int:
    from shipping_async._client import AsyncShippingClient
    from shipping_async.bulk.evidence import EvidenceJournal
    from shipping_async.bulk.journal import JournalError
    from shipping_async.bulk.reconcile import Reconciler
    from shipping_async.cli._evidence import print_report
    from shipping_async.clock import Clock, ScaledClock, SystemClock
    from shipping_async.errors import ShippingError
    from shipping_async.models.webhooks import WebhookStatus
    from shipping_async.scaleout.factory import open_journal

    clock: Clock = ScaledClock(args.sandbox_speed) if args.sandbox_speed != 1.0 else SystemClock()
    try:
        journal: Any = await open_journal(args.journal, clock=clock)
    except (JournalError, OSError, ValueError) as exc:
        print(f"error: cannot open the journal: {printable(exc)}", file=sys.stderr)
        return 2
    try:
        if not isinstance(journal, EvidenceJournal):
            print("error: this journal keeps no evidence", file=sys.stderr)
            return 2
        async with AsyncShippingClient(token, base_url=base_url, clock=clock) as client:
            active = None
            if args.webhook_id is not None:
                webhook_id: int = args.webhook_id

                async def is_active() -> bool:
                    webhook = await client.webhooks.get(webhook_id)
                    return bool(webhook.status == WebhookStatus.ACTIVE)

                active = is_active
            reconciler = Reconciler(
                journal,
                client,
                clock=clock,
                resend_after_silence=args.resend_unknown_after_silence,
                webhook_active=active,
            )
            try:
                report = await reconciler.run_once()
            except (ShippingError, JournalError) as exc:
                print(f"error: {printable(exc)}", file=sys.stderr)
                return 2
    finally:
        await journal.close()
    print_report(report)
    print(
        f"{len(report.settled)} settled, {len(report.resent)} re-sent, "
        f"{len(report.remaining)} still unknown",
        flush=True,
    )
    return 1 if report.remaining else 0
