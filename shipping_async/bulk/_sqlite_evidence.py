"""SQLite evidence rows: ``order_received`` events by order id, for the journal and the
ledger (each with its own events table, stamps and idea of an order's owner)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime

from shipping_async.bulk.evidence import OrderEvidence

#: Who holds the order of the events row ``e`` in a journal: the first job with its id.
JOURNAL_OWNER = "(SELECT key FROM jobs WHERE order_id = e.order_id ORDER BY seq LIMIT 1)"


def insert_events(
    db: sqlite3.Connection,
    order_ids: Sequence[int],
    *,
    events: str = "order_events",
    received_at: str = "?",
    stamp: Sequence[str] = (),
) -> int:
    """Record ``order_ids`` in ``events``, stamped with the SQL ``received_at`` (bound to
    ``stamp``); how many were new."""
    new = 0
    for order_id in order_ids:
        cursor = db.execute(
            f"INSERT INTO {events} (order_id, received_at) VALUES (?, {received_at}) "
            "ON CONFLICT (order_id) DO UPDATE SET deliveries = deliveries + 1 "
            "RETURNING deliveries",
            (order_id, *stamp),
        )
        new += cursor.fetchone()[0] == 1
    return new


def select_events(
    db: sqlite3.Connection,
    since: str,
    until: str | None,
    *,
    events: str = "order_events",
    owner: str = JOURNAL_OWNER,
) -> list[OrderEvidence]:
    """Evidence of ``events`` stamped within ``[since, until]`` (stamps of that table);
    ``owner`` is the SQL naming who holds the order of the row ``e``."""
    sql = (
        f"SELECT e.order_id, e.received_at, e.deliveries, {owner} "
        f"FROM {events} e WHERE e.received_at >= ?"
    )
    params = [since]
    if until is not None:
        sql += " AND e.received_at <= ?"
        params.append(until)
    return [
        OrderEvidence(
            order_id=order_id,
            received_at=datetime.fromisoformat(stamp),
            deliveries=deliveries,
            owner=holder,
        )
        for order_id, stamp, deliveries, holder in db.execute(
            sql + " ORDER BY e.received_at, e.order_id", params
        ).fetchall()
    ]
