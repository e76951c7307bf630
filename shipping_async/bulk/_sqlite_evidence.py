"""The SQLite journal's evidence rows: ``order_received`` events by order id."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime

from shipping_async.bulk._sqlite_rows import wall_stamp
from shipping_async.bulk.evidence import OrderEvidence


def insert_events(db: sqlite3.Connection, order_ids: Sequence[int], stamp: str) -> int:
    new = 0
    for order_id in order_ids:
        cursor = db.execute(
            "INSERT INTO order_events (order_id, received_at) VALUES (?, ?) "
            "ON CONFLICT (order_id) DO UPDATE SET deliveries = deliveries + 1 "
            "RETURNING deliveries",
            (order_id, stamp),
        )
        new += cursor.fetchone()[0] == 1
    return new


def select_events(
    db: sqlite3.Connection, since: datetime, until: datetime | None
) -> list[OrderEvidence]:
    sql = (
        "SELECT e.order_id, e.received_at, e.deliveries, "
        "(SELECT key FROM jobs WHERE json_extract(facts, '$.order_id') = e.order_id "
        "ORDER BY seq LIMIT 1) FROM order_events e WHERE e.received_at >= ?"
    )
    params: list[object] = [wall_stamp(since)]
    if until is not None:
        sql += " AND e.received_at <= ?"
        params.append(wall_stamp(until))
    return [
        OrderEvidence(
            order_id=order_id,
            received_at=datetime.fromisoformat(stamp),
            deliveries=deliveries,
            owner=owner,
        )
        for order_id, stamp, deliveries, owner in db.execute(
            sql + " ORDER BY e.received_at, e.order_id", params
        )
    ]
