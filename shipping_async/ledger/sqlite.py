"""The order ledger in a SQLite file, shared safely by the processes of one host.

One table, ``order_ledger``, in a file of its own (not a bulk journal's: that one is held
exclusively by its run). Unlike the journal, the file is opened in normal locking mode so
that every worker process of a web app can use it; each step is one short ``BEGIN
IMMEDIATE`` transaction, the writers queue on SQLite's lock (``busy_timeout``). stdlib
``sqlite3`` runs on one thread of the ledger's own, so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Self, TypeVar

from shipping_async.ledger._base import LedgerEntry

__all__ = ["SQLiteOrderLedger"]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS order_ledger (
    customer_reference TEXT PRIMARY KEY,
    state TEXT NOT NULL CHECK (state IN ('sending', 'ordered', 'unknown')),
    order_id INTEGER,
    answer BLOB,
    detail TEXT,
    updated_at TEXT NOT NULL
)
"""
_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
_COLUMNS = "customer_reference, state, order_id, answer, detail, updated_at"


def _entry(row: tuple[Any, ...] | None) -> LedgerEntry | None:
    if row is None:
        return None
    reference, state, order_id, answer, detail, updated_at = row
    return LedgerEntry(
        customer_reference=reference,
        state=state,
        order_id=order_id,
        answer=bytes(answer) if answer is not None else None,
        detail=detail,
        updated_at=updated_at,
    )


class SQLiteOrderLedger:
    """An :class:`~shipping_async.ledger.OrderLedger` in one SQLite file.

    >>> ledger = await SQLiteOrderLedger.open("orders.ledger")  # doctest: +SKIP
    >>> client = AsyncShippingClient(order_ledger=ledger)  # doctest: +SKIP
    """

    __slots__ = ("_db", "_executor", "_path")

    def __init__(self, db: sqlite3.Connection, executor: ThreadPoolExecutor, path: str) -> None:
        self._db = db
        self._executor = executor
        self._path = path

    @classmethod
    async def open(cls, path: str | Path) -> Self:
        """Open (creating if needed) the ledger in ``path``."""
        executor = ThreadPoolExecutor(1, thread_name_prefix="shipping-ledger")

        def connect() -> sqlite3.Connection:
            db = sqlite3.connect(
                str(path), timeout=10.0, isolation_level=None, check_same_thread=False
            )
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = FULL")
            db.execute(_SCHEMA)
            return db

        loop = asyncio.get_running_loop()
        try:
            db = await loop.run_in_executor(executor, connect)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(db, executor, str(path))

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        def transaction() -> T:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                result = work(self._db)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            return result

        # Shielded: a cancelled caller must not leave the transaction half-way (the
        # thread finishes it anyway); the caller still sees its cancellation.
        future = asyncio.get_running_loop().run_in_executor(self._executor, transaction)
        return await asyncio.shield(future)

    async def claim(self, customer_reference: str) -> LedgerEntry | None:
        def claim(db: sqlite3.Connection) -> LedgerEntry | None:
            inserted = db.execute(
                f"INSERT INTO order_ledger (customer_reference, state, updated_at) "
                f"VALUES (?, 'sending', {_NOW}) ON CONFLICT (customer_reference) DO NOTHING",
                (customer_reference,),
            ).rowcount
            if inserted:
                return None
            return _entry(
                db.execute(
                    f"SELECT {_COLUMNS} FROM order_ledger WHERE customer_reference = ?",
                    (customer_reference,),
                ).fetchone()
            )

        return await self._run(claim)

    async def record_order(self, customer_reference: str, order_id: int, answer: bytes) -> None:
        await self.resolve(customer_reference, order_id=order_id, answer=answer)

    async def record_unknown(self, customer_reference: str, detail: str) -> None:
        await self._run(
            lambda db: db.execute(
                f"UPDATE order_ledger SET state = 'unknown', detail = ?, updated_at = {_NOW} "
                "WHERE customer_reference = ? AND state != 'ordered'",
                (detail, customer_reference),
            )
        )

    async def forget(self, customer_reference: str) -> None:
        await self._run(
            lambda db: db.execute(
                "DELETE FROM order_ledger WHERE customer_reference = ? AND state != 'ordered'",
                (customer_reference,),
            )
        )

    async def resolve(
        self, customer_reference: str, *, order_id: int | None, answer: bytes | None = None
    ) -> None:
        if order_id is None:
            await self.forget(customer_reference)
            return
        await self._run(
            lambda db: db.execute(
                f"INSERT INTO order_ledger ({_COLUMNS}) "
                f"VALUES (?, 'ordered', ?, ?, NULL, {_NOW}) "
                "ON CONFLICT (customer_reference) DO UPDATE SET state = 'ordered', "
                "order_id = excluded.order_id, answer = excluded.answer, detail = NULL, "
                "updated_at = excluded.updated_at",
                (customer_reference, order_id, answer),
            )
        )

    async def get(self, customer_reference: str) -> LedgerEntry | None:
        return await self._run(
            lambda db: _entry(
                db.execute(
                    f"SELECT {_COLUMNS} FROM order_ledger WHERE customer_reference = ?",
                    (customer_reference,),
                ).fetchone()
            )
        )

    async def unresolved(self) -> list[LedgerEntry]:
        rows = await self._run(
            lambda db: db.execute(
                f"SELECT {_COLUMNS} FROM order_ledger WHERE state != 'ordered' ORDER BY updated_at"
            ).fetchall()
        )
        return [entry for entry in map(_entry, rows) if entry is not None]

    async def aclose(self) -> None:
        """Close the file and the ledger's thread."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._db.close)
        self._executor.shutdown(wait=True)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"SQLiteOrderLedger({self._path!r})"
