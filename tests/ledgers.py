"""Order ledgers of a test's own: SQLite in the test's folder, or PostgreSQL in a fresh schema."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from shipping_async.ledger import OrderLedger, PostgresOrderLedger, SQLiteOrderLedger
from tests.pg_schemas import POSTGRES_DSN, own_schema

#: The ``params`` of a fixture that runs its tests on every kind of ledger.
KINDS = ["sqlite", "postgres"]


@asynccontextmanager
async def open_ledger(kind: str, folder: Path) -> AsyncIterator[OrderLedger]:
    """A new ledger of ``kind`` (one of :data:`KINDS`), closed (and its schema dropped) on
    the way out."""
    if kind == "sqlite":
        async with await SQLiteOrderLedger.open(folder / "orders.ledger") as opened:
            yield opened
        return
    async with (
        own_schema() as schema,
        await PostgresOrderLedger.open(POSTGRES_DSN, schema=schema) as opened_pg,
    ):
        yield opened_pg
