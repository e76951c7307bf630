"""``bulk --reconcile FILE`` and ``--resend-unknown``: unknown orders settled from what the
user found.

The file is CSV with ``key,order_id``; an empty order id (or ``none``) says no order was
created. Each order id is checked with GET /orders/{id} against the job's
customer_reference before the job is settled; ``--resend-unknown`` then declares every
job still unknown as not created, so that the run sends it again.
"""

from __future__ import annotations

import asyncio
import csv
import io
import sys
from pathlib import Path
from typing import Any

from shipping_async.cli._terminal import printable

__all__ = ["settle_from_file"]


async def settle_from_file(
    client: Any, journal: Any, *, path: str | None, resend_unknown: bool
) -> int:
    """Settle the journal's unknown jobs from ``path`` (if given), then, with
    ``resend_unknown``, the rest as not created; 0, or 2 after naming a bad line."""
    from shipping_async.errors import ShippingError

    unknown = {record.key: record for record in await journal.needs_reconciliation()}
    if path:
        text = await asyncio.to_thread(Path(path).read_text, "utf-8")
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
                print(f"error: {path}:{line}: {printable(exc)}", file=sys.stderr)
                return 2
            reference = record.job.order.customer_reference
            if order.customer_reference not in (None, reference):
                print(
                    f"error: {path}:{line}: order {order.id} has "
                    f"customer_reference {order.customer_reference!r}, not {reference!r}",
                    file=sys.stderr,
                )
                return 2
            await journal.reconcile(key, order_id=order.id)
    if resend_unknown:
        for key in unknown:
            await journal.reconcile(key, order_id=None)
    return 0
