"""The SQLite journal: the default store, one file used by one process at a time.

Why stdlib ``sqlite3`` on one dedicated thread rather than ``aiosqlite``: aiosqlite is
exactly that (a thread per connection fed by a queue), so it would add a dependency and
no capability. Owning the thread lets writes be *group-committed*: every write queued
while a commit is running goes into the next transaction, each in its own savepoint, and
every caller is answered only after that transaction is on disk. One fsync then serves
dozens of jobs, so ``synchronous=FULL`` (durable across a power cut, not only a crash)
costs little at thousands of jobs per minute.

WAL mode keeps a commit to one sequential append to the log. ``locking_mode=EXCLUSIVE``
holds the file for the life of the connection: a second process opening the same
journal fails at once instead of working the same jobs, and (with the shared-memory
index unused) the file works on any filesystem. Because no other process can hold a
lease, opening the journal ends every lease left by a previous process and turns its
``ORDERING`` jobs (sent, answer never recorded) into ``UNKNOWN``.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, time
from decimal import Decimal
from pathlib import Path
from typing import Any, Self, TypeVar, Unpack

import msgspec

from shipping_async.bulk.jobs import ShipmentJob
from shipping_async.bulk.journal import (
    FINISHED_STATES,
    WORKABLE_STATES,
    JobFields,
    JobRecord,
    JobState,
    JournalError,
    JournalStateError,
    LeaseLostError,
)
from shipping_async.clock import Clock, SystemClock

__all__ = ["SQLiteJournal"]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    account TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL,
    job BLOB NOT NULL,
    facts BLOB NOT NULL,
    retryable INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT,
    lease_until REAL,
    order_intent_at TEXT,
    updated_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state, account);
"""
_COLUMNS = (
    "key, account, state, job, facts, attempts, lease_owner, lease_until, order_intent_at, "
    "updated_at"
)
_CHUNK = 500  # keys per IN (...) list, well under SQLite's parameter limit
_DIED_MID_ORDER = (
    "the worker stopped after recording the order intent and before recording the "
    "answer: the order may exist; reconcile before sending it again"
)


class _Facts(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The :class:`JobFields` of a record, stored as one JSON value."""

    quote_id: int | None = None
    estimate_id: int | None = None
    carrier: str | None = None
    service: str | None = None
    cost: Decimal | None = None
    currency: str | None = None
    hub: bool = False
    order_id: int | None = None
    waybills: list[str | None] = msgspec.field(default_factory=list)
    pickup_confirmation: str | None = None
    pickup_date: date | None = None
    pickup_from: time | None = None
    pickup_to: time | None = None
    error: str | None = None
    error_stage: str | None = None
    retryable: bool = False


_FACTS = msgspec.json.Decoder(_Facts)
_JOB = msgspec.json.Decoder(ShipmentJob)
_ENCODER = msgspec.json.Encoder()
_NO_ERROR: JobFields = {"error": None, "error_stage": None, "retryable": False}

_Op = tuple[Callable[[sqlite3.Connection], Any], "asyncio.Future[Any]"]


class SQLiteJournal:
    """A :class:`~shipping_async.bulk.journal.Journal` in one SQLite file.

    Example::

        async with await SQLiteJournal.open("batch.journal") as journal:
            records = await journal.add(jobs)
    """

    def __init__(self, connection: sqlite3.Connection, executor: ThreadPoolExecutor, clock: Clock):
        self._db = connection
        self._executor = executor
        self._clock = clock
        self._pending: list[_Op] = []
        self._flusher: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    async def open(cls, path: str | Path, *, clock: Clock | None = None) -> Self:
        """Open (or create) the journal at ``path``; fails if another process has it open."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-journal")
        clock = clock or SystemClock()
        loop = asyncio.get_running_loop()
        try:
            db = await loop.run_in_executor(executor, _connect, str(path), clock.now())
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(db, executor, clock)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- the Journal protocol ------------------------------------------------------------

    async def add(self, jobs: Sequence[ShipmentJob]) -> list[JobRecord]:
        now = self._stamp()
        rows = [
            (job.key, job.account, JobState.PENDING.value, _ENCODER.encode(job), b"{}", now)
            for job in jobs
        ]

        def insert(db: sqlite3.Connection) -> list[JobRecord]:
            db.executemany(
                "INSERT OR IGNORE INTO jobs (key, account, state, job, facts, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )
            found = {record.key: record for record in _select_keys(db, [r[0] for r in rows])}
            return [found[row[0]] for row in rows]

        return await self._write(insert)

    async def claim(
        self,
        worker_id: str,
        *,
        lease: float,
        limit: int,
        keys: Sequence[str] | None = None,
        account: str | None = None,
        retry_failed: bool = False,
    ) -> list[JobRecord]:
        now = self._clock.now()

        def take(db: sqlite3.Connection) -> list[JobRecord]:
            _expire_orders(db, now)
            states = [state.value for state in WORKABLE_STATES]
            where = f"(state IN ({_marks(states)})"
            params: list[Any] = [*states]
            if retry_failed:
                where += " OR (state = ? AND retryable = 1)"
                params.append(JobState.FAILED.value)
            where += ") AND (lease_owner IS NULL OR lease_until <= ?)"
            params.append(now.timestamp())
            if account is not None:
                where += " AND account = ?"
                params.append(account)
            claimed: list[JobRecord] = []
            chunks: list[Sequence[str] | None] = [None] if keys is None else [*_chunks(keys)]
            for chunk in chunks:
                room = limit - len(claimed)
                if room <= 0:
                    break
                sql, args = where, list(params)
                if chunk is not None:
                    sql += f" AND key IN ({_marks(chunk)})"
                    args.extend(chunk)
                rows = db.execute(
                    f"SELECT {_COLUMNS} FROM jobs WHERE {sql} ORDER BY seq LIMIT ?",
                    [*args, room],
                ).fetchall()
                claimed.extend(_claim_row(db, _record(row), worker_id, now, lease) for row in rows)
            return claimed

        return await self._write(take)

    async def renew(self, worker_id: str, keys: Sequence[str], *, lease: float) -> set[str]:
        now = self._clock.now()

        def extend(db: sqlite3.Connection) -> set[str]:
            held: set[str] = set()
            for chunk in _chunks(keys):
                cursor = db.execute(
                    f"UPDATE jobs SET lease_until = ? WHERE lease_owner = ? AND lease_until > ? "
                    f"AND key IN ({_marks(chunk)}) RETURNING key",
                    [now.timestamp() + lease, worker_id, now.timestamp(), *chunk],
                )
                held.update(row[0] for row in cursor.fetchall())
            return held

        return await self._write(extend)

    async def record(
        self, worker_id: str, key: str, state: JobState, **fields: Unpack[JobFields]
    ) -> JobRecord:
        if state is JobState.ORDERING or state in FINISHED_STATES:
            raise JournalStateError(f"{state.value}: use begin_order() or finish() for it")
        return await self._update(worker_id, key, state, fields, keep_lease=True)

    async def begin_order(
        self, worker_id: str, key: str, *, quote_id: int, estimate_id: int
    ) -> JobRecord:
        return await self._update(
            worker_id,
            key,
            JobState.ORDERING,
            {"quote_id": quote_id, "estimate_id": estimate_id},
            keep_lease=True,
            require=JobState.QUOTED,
        )

    async def finish(
        self, worker_id: str, key: str, state: JobState, **fields: Unpack[JobFields]
    ) -> JobRecord:
        if state not in FINISHED_STATES:
            raise JournalStateError(f"{state.value} is not a terminal state")
        return await self._update(worker_id, key, state, fields, keep_lease=False)

    async def release(self, worker_id: str, keys: Sequence[str]) -> None:
        def drop(db: sqlite3.Connection) -> None:
            for chunk in _chunks(keys):
                db.execute(
                    "UPDATE jobs SET lease_owner = NULL, lease_until = NULL "
                    f"WHERE lease_owner = ? AND key IN ({_marks(chunk)})",
                    [worker_id, *chunk],
                )

        await self._write(drop)

    async def reconcile(self, key: str, *, order_id: int | None) -> JobRecord:
        now = self._stamp()

        def settle(db: sqlite3.Connection) -> JobRecord:
            record = _select_one(db, key)
            if record.state is not JobState.UNKNOWN:
                raise JournalStateError(
                    f"job {key!r} is {record.state.value}, not unknown: nothing to reconcile"
                )
            fields: JobFields = {**_NO_ERROR, "order_id": order_id}
            state = JobState.ORDERED if order_id is not None else JobState.PENDING
            return _store(db, record, state, fields, now, lease=(None, None))

        return await self._write(settle)

    async def get(self, key: str) -> JobRecord | None:
        def read(db: sqlite3.Connection) -> JobRecord | None:
            rows = _select_keys(db, [key])
            return rows[0] if rows else None

        return await self._read(read)

    async def records(
        self, *, states: Collection[JobState] | None = None
    ) -> AsyncIterator[JobRecord]:
        wanted = [state.value for state in states] if states is not None else None
        after = 0
        while True:
            page = await self._read(functools.partial(_page, after=after, states=wanted))
            for _, record in page:
                yield record
            if len(page) < _CHUNK:
                return
            after = page[-1][0]

    async def needs_reconciliation(self) -> list[JobRecord]:
        return [record async for record in self.records(states=[JobState.UNKNOWN])]

    async def counts(self) -> dict[JobState, int]:
        def count(db: sqlite3.Connection) -> dict[JobState, int]:
            found = dict(db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state"))
            return {state: int(found.get(state.value, 0)) for state in JobState}

        return await self._read(count)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._flusher is not None:
            await asyncio.shield(self._flusher)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._db.close)
        self._executor.shutdown(wait=True)

    # -- the writer ----------------------------------------------------------------------

    def _stamp(self) -> str:
        return self._clock.now().isoformat()

    async def _update(
        self,
        worker_id: str,
        key: str,
        state: JobState,
        fields: JobFields,
        *,
        keep_lease: bool,
        require: JobState | None = None,
    ) -> JobRecord:
        now = self._clock.now()

        def change(db: sqlite3.Connection) -> JobRecord:
            record = _select_one(db, key)
            expiry = record.lease_until
            if record.lease_owner != worker_id or expiry is None or expiry <= now:
                raise LeaseLostError(f"job {key!r}: worker {worker_id} does not hold its lease")
            if require is not None and record.state is not require:
                raise JournalStateError(
                    f"job {key!r} is {record.state.value}; {state.value} needs {require.value}"
                )
            lease = (worker_id, expiry.timestamp()) if keep_lease else (None, None)
            return _store(db, record, state, fields, now.isoformat(), lease=lease)

        return await self._write(change)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise JournalError("the journal is closed")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, self._db)

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise JournalError("the journal is closed")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._pending.append((fn, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())
        # Shielded: once queued, a write is committed even if its caller is cancelled,
        # so the caller's view ("maybe written") matches the store's.
        return await asyncio.shield(future)

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                outcomes = await loop.run_in_executor(self._executor, _commit, self._db, batch)
            except BaseException as exc:  # the commit itself failed: nobody's write stands
                for _, future in batch:
                    if not future.done():
                        future.set_exception(JournalError(f"journal commit failed: {exc!r}"))
                raise
            for (_, future), (ok, value) in zip(batch, outcomes, strict=True):
                if future.done():
                    continue
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)


def _connect(path: str, now: datetime) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=0.2, isolation_level=None, check_same_thread=False)
    try:
        db.execute("PRAGMA locking_mode = EXCLUSIVE")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")
        db.execute("BEGIN EXCLUSIVE")
    except sqlite3.OperationalError as exc:
        db.close()
        raise JournalError(
            f"cannot open the journal {path}: {exc} (is another run using it?)"
        ) from exc
    db.executescript(_SCHEMA)  # commits; the exclusive lock stays held
    db.execute("BEGIN IMMEDIATE")
    # One process at a time: whatever a previous process leased is abandoned.
    _expire_orders(db, now, everyone=True)
    db.execute("UPDATE jobs SET lease_owner = NULL, lease_until = NULL")
    db.execute("COMMIT")
    return db


def _commit(db: sqlite3.Connection, batch: list[_Op]) -> list[tuple[bool, Any]]:
    outcomes: list[tuple[bool, Any]] = []
    db.execute("BEGIN IMMEDIATE")
    try:
        for fn, _ in batch:
            db.execute("SAVEPOINT op")
            try:
                outcomes.append((True, fn(db)))
            except Exception as exc:  # one caller's refusal must not undo the others
                db.execute("ROLLBACK TO op")
                outcomes.append((False, exc))
            db.execute("RELEASE op")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return outcomes


def _expire_orders(db: sqlite3.Connection, now: datetime, *, everyone: bool = False) -> None:
    """ORDERING jobs whose worker is gone (lease over) cannot know their answer: UNKNOWN."""
    sql = f"SELECT {_COLUMNS} FROM jobs WHERE state = ?"
    params: list[Any] = [JobState.ORDERING.value]
    if not everyone:
        sql += " AND (lease_until IS NULL OR lease_until <= ?)"
        params.append(now.timestamp())
    for row in db.execute(sql, params).fetchall():
        fields: JobFields = {"error": _DIED_MID_ORDER, "error_stage": "order", "retryable": False}
        _store(db, _record(row), JobState.UNKNOWN, fields, now.isoformat(), lease=(None, None))


def _claim_row(
    db: sqlite3.Connection, record: JobRecord, worker_id: str, now: datetime, lease: float
) -> JobRecord:
    db.execute(
        "UPDATE jobs SET attempts = attempts + 1 WHERE key = ?",
        [record.key],
    )
    record = msgspec.structs.replace(record, attempts=record.attempts + 1)
    state = record.next_stage
    fields = _NO_ERROR if record.state is JobState.FAILED else {}
    return _store(
        db, record, state, fields, now.isoformat(), lease=(worker_id, now.timestamp() + lease)
    )


def _store(
    db: sqlite3.Connection,
    record: JobRecord,
    state: JobState,
    fields: JobFields,
    stamp: str,
    *,
    lease: tuple[str | None, float | None],
) -> JobRecord:
    facts = msgspec.structs.replace(_facts_of(record), **fields)
    intent = stamp if state is JobState.ORDERING else None
    cursor = db.execute(
        "UPDATE jobs SET state = ?, facts = ?, retryable = ?, lease_owner = ?, lease_until = ?, "
        "order_intent_at = COALESCE(?, order_intent_at), updated_at = ? WHERE key = ? "
        f"RETURNING {_COLUMNS}",
        [
            state.value,
            _ENCODER.encode(facts),
            int(facts.retryable),
            *lease,
            intent,
            stamp,
            record.key,
        ],
    )
    return _record(cursor.fetchone())


def _facts_of(record: JobRecord) -> _Facts:
    return _Facts(**{name: getattr(record, name) for name in _Facts.__struct_fields__})


def _record(row: tuple[Any, ...]) -> JobRecord:
    key, account, state, job, facts, attempts, owner, until, intent, updated = row
    return JobRecord(
        key=key,
        job=_JOB.decode(job),
        state=JobState(state),
        account=account,
        attempts=attempts,
        lease_owner=owner,
        lease_until=datetime.fromtimestamp(until, UTC) if until is not None else None,
        order_intent_at=datetime.fromisoformat(intent) if intent else None,
        updated_at=datetime.fromisoformat(updated),
        **msgspec.structs.asdict(_FACTS.decode(facts)),
    )


def _select_keys(db: sqlite3.Connection, keys: Sequence[str]) -> list[JobRecord]:
    records: list[JobRecord] = []
    for chunk in _chunks(keys):
        sql = f"SELECT {_COLUMNS} FROM jobs WHERE key IN ({_marks(chunk)}) ORDER BY seq"
        records.extend(_record(row) for row in db.execute(sql, chunk))
    return records


def _select_one(db: sqlite3.Connection, key: str) -> JobRecord:
    rows = _select_keys(db, [key])
    if not rows:
        raise JournalStateError(f"no job with key {key!r} in the journal")
    return rows[0]


def _page(
    db: sqlite3.Connection, *, after: int, states: list[str] | None
) -> list[tuple[int, JobRecord]]:
    sql = f"SELECT seq, {_COLUMNS} FROM jobs WHERE seq > ?"
    params: list[Any] = [after]
    if states is not None:
        sql += f" AND state IN ({_marks(states)})"
        params.extend(states)
    rows = db.execute(sql + " ORDER BY seq LIMIT ?", [*params, _CHUNK]).fetchall()
    return [(row[0], _record(row[1:])) for row in rows]


def _chunks(keys: Sequence[str]) -> list[Sequence[str]]:
    return [keys[start : start + _CHUNK] for start in range(0, len(keys), _CHUNK)]


def _marks(values: Sequence[Any]) -> str:
    return ", ".join("?" * len(values))
