"""PostgreSQL evidence rows: ``order_received`` events by order id, for the journal and
the ledger (each with its own events table and its own idea of an order's owner)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime

import asyncpg

from shipping_async.bulk.evidence import OrderEvidence


async def record_events(pool: asyncpg.Pool, events: str, order_ids: Sequence[int]) -> int:
    """Record ``order_ids`` in the table ``events``, stamped with the database's ``now()``;
    how many were new."""
    if not order_ids:
        return 0
    counted = Counter(order_ids)  # one row per order in one statement
    rows = await pool.fetch(
        f"INSERT INTO {events} AS e (order_id, deliveries) "
        "SELECT * FROM unnest($1::bigint[], $2::int[]) ON CONFLICT (order_id) "
        "DO UPDATE SET deliveries = e.deliveries + EXCLUDED.deliveries "
        "RETURNING (xmax = 0) AS new",
        list(counted),
        list(counted.values()),
    )
    return sum(1 for row in rows if row["new"])


async def select_events(
    pool: asyncpg.Pool, events: str, owner: str, since: datetime, until: datetime | None
) -> list[OrderEvidence]:
    """Evidence of ``events`` first received within ``[since, until]``; ``owner`` is the
    SQL expression naming who holds the order of the row ``e``."""
    rows = await pool.fetch(
        f"SELECT e.order_id, e.received_at, e.deliveries, {owner} AS owner "
        f"FROM {events} e WHERE e.received_at >= $1 "
        "AND ($2::timestamptz IS NULL OR e.received_at <= $2) "
        "ORDER BY e.received_at, e.order_id",
        since,
        until,
    )
    return [
        OrderEvidence(
            order_id=row["order_id"],
            received_at=row["received_at"],
            deliveries=row["deliveries"],
            owner=row["owner"],
        )
        for row in rows
    ]


async def database_now(pool: asyncpg.Pool) -> datetime:
    """The database's ``now()``: the clock of the evidence stamps."""
    now: datetime = await pool.fetchval("SELECT now()")
    return now
