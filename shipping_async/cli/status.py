"""``shipping-async status``: jobs per state and account, and the jobs that need reconciliation.

Reads the journal only; safe to run while workers are at work (on a PostgreSQL journal;
a SQLite journal is locked by the run using it).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any, TextIO

from shipping_async.cli._terminal import printable

__all__ = ["print_status", "register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``status`` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "status",
        help="progress of a journal per state and account; jobs to reconcile",
        description=(
            "Show how many jobs of the journal are in each state, per account, and list "
            "the jobs whose order outcome is unknown (POST /orders sent, no answer): "
            "they are never re-sent until reconciled."
        ),
    )
    parser.add_argument(
        "--journal", required=True, help="postgresql://host/db[?schema=NAME] or a journal file"
    )
    parser.add_argument(
        "--sandbox-speed",
        type=float,
        default=1.0,
        help="the API's clock speed (a scaled sandbox): the webhook retry horizon scales",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print the status; returns 0, or 2 when the journal cannot be opened."""
    if not args.sandbox_speed > 0:
        print("error: --sandbox-speed must be > 0", file=sys.stderr)
        return 2
    return asyncio.run(_main(args.journal, args.sandbox_speed))


async def _main(spec: str, speed: float = 1.0) -> int:
    from shipping_async.bulk.journal import JournalError
    from shipping_async.scaleout.factory import open_journal

    try:
        journal: Any = await open_journal(spec)
    except (JournalError, OSError, ValueError) as exc:
        print(f"error: cannot open the journal: {printable(exc)}", file=sys.stderr)
        return 2
    try:
        await print_status(journal, sys.stdout, speed=speed)
    finally:
        await journal.close()
    return 0


async def print_status(journal: Any, out: TextIO, *, speed: float = 1.0) -> None:
    """Write the table of states per account and the reconciliation list to ``out``;
    with evidence in the journal, what it says of each unknown job."""
    from shipping_async.bulk.evidence import EvidenceJournal
    from shipping_async.bulk.journal import JobState
    from shipping_async.bulk.reconcile import describe_evidence

    # A wrapped store (the outage guard) passes counts_by_account through: ask the store.
    if hasattr(getattr(journal, "store", journal), "counts_by_account"):
        per_account: dict[str, dict[JobState, int]] = await journal.counts_by_account()
    else:
        per_account = {"*": await journal.counts()}
    states = list(JobState)
    header = ["account", *(state.value for state in states), "total"]
    rows = [
        [
            printable(account) or "(default)",
            *(str(counts[state]) for state in states),
            str(sum(counts.values())),
        ]
        for account, counts in per_account.items()
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print(
            "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)), file=out
        )
    unknown = await journal.needs_reconciliation()
    if unknown:
        print(f"\n{len(unknown)} job(s) need reconciliation (order outcome unknown):", file=out)
        for record in unknown:
            since = record.order_intent_at.isoformat() if record.order_intent_at else "-"
            print(
                f"  {printable(record.key)}  account={printable(record.account) or '(default)'}  "
                f"customer_reference={printable(record.job.order.customer_reference)}  "
                f"intent_at={since}",
                file=out,
            )
            if isinstance(journal, EvidenceJournal):
                said = await describe_evidence(journal, record, speed=speed)
                print(f"    evidence: {printable(said)}", file=out)
        print(
            "find each order (by customer_reference), then: shipping-async journal reconcile "
            "--journal ... KEY ORDER_ID (or 'none' if it was never created)",
            file=out,
        )
    out.flush()
