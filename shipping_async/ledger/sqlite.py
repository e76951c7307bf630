"""The order ledger in a SQLite file, shared safely by the processes of one host.

One table, ``order_ledger``, in a file of its own (not a bulk journal's: that one is held
exclusively by its run). Unlike the journal, the file is opened in normal locking mode so
that every worker process of a web app can use it; each step is one short ``BEGIN
IMMEDIATE`` transaction, the writers queue on SQLite's lock (``busy_timeout``). stdlib
``sqlite3`` runs on one thread of the ledger's own, so the event loop never blocks.

The file also keeps ``order_received`` evidence (table ``ledger_order_events``, see
:mod:`shipping_async.bulk.evidence`), stamped on the host's wall clock like the ledger's
own times, so that :mod:`shipping_async.ledger.evidence` settles unresolved references.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self, TypeVar

from shipping_async.bulk._sqlite_evidence import insert_events, select_events
from shipping_async.bulk.evidence import OrderEvidence
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
    updated_at TEXT NOT NULL,
    claimed_at TEXT
)
"""
# Ledgers made before the evidence came have no claimed_at: added, filled from updated_at.
_MIGRATE = (
    "ALTER TABLE order_ledger ADD COLUMN claimed_at TEXT",
    "UPDATE order_ledger SET claimed_at = updated_at WHERE claimed_at IS NULL",
)
_EVIDENCE_SCHEMA = (
    "CREATE INDEX IF NOT EXISTS order_ledger_by_order ON order_ledger (order_id)",
    # unresolved() runs every second beside a web app: never a scan of every order.
    "CREATE INDEX IF NOT EXISTS order_ledger_unresolved ON order_ledger (updated_at) "
    "WHERE state != 'ordered'",
    "CREATE TABLE IF NOT EXISTS ledger_order_events (order_id INTEGER PRIMARY KEY, "
    "received_at TEXT NOT NULL, deliveries INTEGER NOT NULL DEFAULT 1)",
    "CREATE INDEX IF NOT EXISTS ledger_order_events_by_time ON ledger_order_events (received_at)",
)
_EVENTS = "ledger_order_events"
#: Who holds the order of the events row ``e``: the reference the ledger holds it for.
_OWNER = "(SELECT customer_reference FROM order_ledger l WHERE l.order_id = e.order_id LIMIT 1)"
_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
_COLUMNS = "customer_reference, state, order_id, answer, detail, updated_at, claimed_at"


def _entry(row: tuple[Any, ...] | None) -> LedgerEntry | None:
    if row is None:
        return None
    reference, state, order_id, answer, detail, updated_at, claimed_at = row
    return LedgerEntry(
        customer_reference=reference,
        state=state,
        order_id=order_id,
        answer=bytes(answer) if answer is not None else None,
        detail=detail,
        updated_at=updated_at,
        claimed_at=claimed_at or updated_at,
    )


def _stamp(at: datetime) -> str:
    """``at`` as the ledger's text stamps (UTC, milliseconds), which compare as text."""
    at = at.astimezone(UTC)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


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
            columns = {row[1] for row in db.execute("PRAGMA table_info(order_ledger)")}
            if "claimed_at" not in columns:
                for statement in _MIGRATE:
                    db.execute(statement)
            for statement in _EVIDENCE_SCHEMA:
                db.execute(statement)
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
                f"INSERT INTO order_ledger (customer_reference, state, updated_at, claimed_at) "
                f"VALUES (?, 'sending', {_NOW}, {_NOW}) "
                "ON CONFLICT (customer_reference) DO NOTHING",
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

    async def free_unknown(self, customer_reference: str, *, updated_at: str) -> bool:
        freed = await self._run(
            lambda db: (
                db.execute(
                    "DELETE FROM order_ledger WHERE customer_reference = ? AND state = 'unknown' "
                    "AND updated_at = ?",
                    (customer_reference, updated_at),
                ).rowcount
            )
        )
        return bool(freed)

    async def resolve(
        self, customer_reference: str, *, order_id: int | None, answer: bytes | None = None
    ) -> None:
        if order_id is None:
            await self.forget(customer_reference)
            return
        await self._run(
            lambda db: db.execute(
                f"INSERT INTO order_ledger ({_COLUMNS}) "
                f"VALUES (?, 'ordered', ?, ?, NULL, {_NOW}, {_NOW}) "
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

    # -- evidence: order_received events (see shipping_async.bulk.evidence) --------------

    async def record_order_received(self, order_ids: Sequence[int]) -> int:
        """Record ``order_received`` evidence, stamped with the host's wall clock."""
        if not order_ids:
            return 0

        return await self._run(
            functools.partial(insert_events, order_ids=order_ids, events=_EVENTS, received_at=_NOW)
        )

    async def order_received(
        self, *, since: datetime, until: datetime | None = None
    ) -> list[OrderEvidence]:
        """Evidence first received within ``[since, until]``; the owner is the reference
        the ledger holds that order for."""
        return await self._run(
            functools.partial(
                select_events,
                since=_stamp(since),
                until=None if until is None else _stamp(until),
                events=_EVENTS,
                owner=_OWNER,
            )
        )

    async def evidence_now(self) -> datetime:
        """The host's wall clock: the clock of the ledger's stamps."""
        return datetime.now(UTC)

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
