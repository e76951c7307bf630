"""The order ledger in PostgreSQL: one table every worker on every host shares.

The table ``order_ledger`` lives in the journal's schema (``shipping_async`` by default)
but is created here, with ``CREATE TABLE IF NOT EXISTS`` under the schema's advisory
lock, apart from the journal's migrations: the two evolve independently. Each step is
one statement; ``claim`` is an ``INSERT ... ON CONFLICT DO NOTHING``, so of two workers
claiming one reference at once exactly one wins.

``order_received`` evidence (see :mod:`shipping_async.bulk.evidence`) goes to the table
``ledger_order_events`` beside it, stamped with the database's ``now()`` like the
ledger's own times (not the journal's ``order_events``: the two evolve independently).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Self

import asyncpg

from shipping_async.bulk._pg_evidence import database_now, record_events, select_events
from shipping_async.bulk.evidence import OrderEvidence
from shipping_async.ledger._base import LedgerEntry

__all__ = ["PostgresOrderLedger"]

_COLUMNS = (
    "customer_reference, state, order_id, answer, detail, updated_at::text, "
    "coalesce(claimed_at, updated_at)::text"
)


def _entry(row: Any) -> LedgerEntry | None:
    if row is None:
        return None
    return LedgerEntry(
        customer_reference=row[0],
        state=row[1],
        order_id=row[2],
        answer=bytes(row[3]) if row[3] is not None else None,
        detail=row[4],
        updated_at=row[5],
        claimed_at=row[6],
    )


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class PostgresOrderLedger:
    """An :class:`~shipping_async.ledger.OrderLedger` in a PostgreSQL table.

    >>> ledger = await PostgresOrderLedger.open("postgresql://db/shipping")  # doctest: +SKIP
    """

    __slots__ = ("_events", "_owned", "_pool", "_table")

    def __init__(self, pool: asyncpg.Pool, *, schema: str, owned: bool) -> None:
        self._pool = pool
        self._table = f"{_quote_ident(schema)}.order_ledger"
        self._events = f"{_quote_ident(schema)}.ledger_order_events"
        self._owned = owned

    @classmethod
    async def open(
        cls, dsn: str | asyncpg.Pool, *, schema: str = "shipping_async"
    ) -> PostgresOrderLedger:
        """Connect (or use ``dsn`` as a pool) and create the table if it is missing."""
        owned = isinstance(dsn, str)
        pool: Any = await asyncpg.create_pool(dsn, min_size=1, max_size=4) if owned else dsn
        try:
            async with pool.acquire() as connection, connection.transaction():
                await connection.execute("SELECT pg_advisory_xact_lock(hashtext($1))", schema)
                await connection.execute(f"CREATE SCHEMA IF NOT EXISTS {_quote_ident(schema)}")
                await connection.execute(
                    f"""
                    CREATE TABLE IF NOT EXISTS {_quote_ident(schema)}.order_ledger (
                        customer_reference text PRIMARY KEY,
                        state text NOT NULL CHECK (state IN ('sending', 'ordered', 'unknown')),
                        order_id bigint,
                        answer bytea,
                        detail text,
                        updated_at timestamptz NOT NULL DEFAULT now()
                    )
                    """
                )
                # Added with the evidence: a table made before gains the column.
                for statement in (
                    "ALTER TABLE {s}.order_ledger ADD COLUMN IF NOT EXISTS claimed_at timestamptz",
                    "CREATE INDEX IF NOT EXISTS order_ledger_by_order "
                    "ON {s}.order_ledger (order_id)",
                    # unresolved() runs every second beside a web app: never a full scan.
                    "CREATE INDEX IF NOT EXISTS order_ledger_unresolved "
                    "ON {s}.order_ledger (updated_at) WHERE state != 'ordered'",
                    "CREATE TABLE IF NOT EXISTS {s}.ledger_order_events (order_id bigint "
                    "PRIMARY KEY, received_at timestamptz NOT NULL DEFAULT now(), "
                    "deliveries integer NOT NULL DEFAULT 1)",
                    "CREATE INDEX IF NOT EXISTS ledger_order_events_by_time "
                    "ON {s}.ledger_order_events (received_at)",
                ):
                    await connection.execute(statement.format(s=_quote_ident(schema)))
        except BaseException:
            if owned:
                await pool.close()
            raise
        return cls(pool, schema=schema, owned=owned)

    async def claim(self, customer_reference: str) -> LedgerEntry | None:
        while True:
            async with self._pool.acquire() as connection:
                won = await connection.fetchval(
                    f"INSERT INTO {self._table} (customer_reference, state, claimed_at) "
                    "VALUES ($1, 'sending', now()) ON CONFLICT (customer_reference) DO NOTHING "
                    "RETURNING true",
                    customer_reference,
                )
                if won:
                    return None
                entry = _entry(
                    await connection.fetchrow(
                        f"SELECT {_COLUMNS} FROM {self._table} WHERE customer_reference = $1",
                        customer_reference,
                    )
                )
            if entry is not None:
                return entry
            # Forgotten between the two statements: claim again.

    async def record_order(self, customer_reference: str, order_id: int, answer: bytes) -> None:
        await self.resolve(customer_reference, order_id=order_id, answer=answer)

    async def record_unknown(self, customer_reference: str, detail: str) -> None:
        await self._pool.execute(
            f"UPDATE {self._table} SET state = 'unknown', detail = $2, updated_at = now() "
            "WHERE customer_reference = $1 AND state != 'ordered'",
            customer_reference,
            detail,
        )

    async def forget(self, customer_reference: str) -> None:
        await self._pool.execute(
            f"DELETE FROM {self._table} WHERE customer_reference = $1 AND state != 'ordered'",
            customer_reference,
        )

    async def free_unknown(self, customer_reference: str, *, updated_at: str) -> bool:
        status: str = await self._pool.execute(
            f"DELETE FROM {self._table} WHERE customer_reference = $1 AND state = 'unknown' "
            "AND updated_at::text = $2",
            customer_reference,
            updated_at,
        )
        return status != "DELETE 0"

    async def resolve(
        self, customer_reference: str, *, order_id: int | None, answer: bytes | None = None
    ) -> None:
        if order_id is None:
            await self.forget(customer_reference)
            return
        await self._pool.execute(
            f"INSERT INTO {self._table} (customer_reference, state, order_id, answer, claimed_at) "
            "VALUES ($1, 'ordered', $2, $3, now()) ON CONFLICT (customer_reference) DO UPDATE SET "
            "state = 'ordered', order_id = excluded.order_id, answer = excluded.answer, "
            "detail = NULL, updated_at = now()",
            customer_reference,
            order_id,
            answer,
        )

    async def get(self, customer_reference: str) -> LedgerEntry | None:
        return _entry(
            await self._pool.fetchrow(
                f"SELECT {_COLUMNS} FROM {self._table} WHERE customer_reference = $1",
                customer_reference,
            )
        )

    async def unresolved(self) -> list[LedgerEntry]:
        rows = await self._pool.fetch(
            f"SELECT {_COLUMNS} FROM {self._table} WHERE state != 'ordered' ORDER BY updated_at"
        )
        return [entry for entry in map(_entry, rows) if entry is not None]

    # -- evidence: order_received events (see shipping_async.bulk.evidence) --------------

    async def record_order_received(self, order_ids: Sequence[int]) -> int:
        """Record ``order_received`` evidence, stamped with the database's ``now()``."""
        return await record_events(self._pool, self._events, order_ids)

    async def order_received(
        self, *, since: datetime, until: datetime | None = None
    ) -> list[OrderEvidence]:
        """Evidence first received within ``[since, until]``; the owner is the reference
        the ledger holds that order for."""
        owner = (
            f"(SELECT customer_reference FROM {self._table} l WHERE l.order_id = e.order_id "
            "LIMIT 1)"
        )
        return await select_events(self._pool, self._events, owner, since, until)

    async def evidence_now(self) -> datetime:
        """The database's ``now()``: the clock of the ledger's stamps and its evidence."""
        return await database_now(self._pool)

    async def aclose(self) -> None:
        """Close the pool if this ledger made it."""
        if self._owned:
            await self._pool.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"PostgresOrderLedger({self._table})"
