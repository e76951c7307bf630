"""The SQLite journal: the default store, one file used by one process at a time.

Why stdlib ``sqlite3`` on one dedicated thread rather than ``aiosqlite``: aiosqlite is
exactly that (a thread per connection fed by a queue), so it would add a dependency and
no capability. Owning the thread lets writes be *group-committed*: every write queued
while a commit is running goes into the next transaction, each in its own savepoint, and
every caller is answered only after that transaction is on disk. One fsync then serves
dozens of jobs, so ``synchronous=FULL`` (durable across a power cut, not only a crash)
costs little at thousands of jobs per minute. The one exception is the order intent
(``begin_order``): it is committed alone, on the event loop's thread, once the connection
is free, and returns without yielding, so that its request is written right after the
commit with nothing in between (a crash in between leaves the job ``unknown`` though the
server never heard of it); see :mod:`shipping_async._send_gate`.

WAL mode keeps a commit to one sequential append to the log. ``locking_mode=EXCLUSIVE``
holds the file for the life of the connection: a second process opening the same
journal fails at once instead of working the same jobs, and (with the shared-memory
index unused) the file works on any filesystem. Because no other process can hold a
lease, opening the journal ends every lease left by a previous process and turns its
``ORDERING`` jobs (sent, answer never recorded) into ``UNKNOWN`` - except those whose
request the previous process never wrote, which its sent marks (``<journal>-sent``, see
:mod:`~shipping_async.bulk._sent_marks`) prove on the same boot: they are ``QUOTED``
again and sent by this run.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Self, TypeVar

from shipping_async.bulk._journal_store import (
    JOB_ENCODER,
    NO_ERROR,
    JournalStore,
    lease_lapsed,
    lease_lost,
    not_unknown,
    read_column,
    reconciled_state,
    wrong_state,
)
from shipping_async.bulk._sent_marks import SentMarks, boot_id, previous_marks
from shipping_async.bulk._sqlite_evidence import insert_events, select_events
from shipping_async.bulk._sqlite_rows import (
    CHUNK,
    COLUMNS,
    NO_LEASE,
    Lease,
    Write,
    claim_row,
    commit_batch,
    commit_one,
    connect,
    expire_orders,
    held_keys,
    intent_ages,
    key_chunks,
    placeholders,
    read_page,
    select_keys,
    select_one,
    store_state,
    to_record,
    wall_stamp,
)
from shipping_async.bulk.evidence import OrderEvidence
from shipping_async.bulk.jobs import ShipmentJob
from shipping_async.bulk.journal import (
    FINISHED_STATES,
    WORKABLE_STATES,
    JobFields,
    JobRecord,
    JobState,
    JournalError,
)
from shipping_async.clock import Clock, SystemClock

__all__ = ["SQLiteJournal"]

T = TypeVar("T")

#: Claimed jobs kept decoded at most (far above any run's jobs in flight).
_KEPT_JOBS = 20_000


class SQLiteJournal(JournalStore):
    """A :class:`~shipping_async.bulk.journal.Journal` in one SQLite file.

    Example::

        async with await SQLiteJournal.open("batch.journal") as journal:
            records = await journal.add(jobs)
    """

    #: ``begin_order`` commits on the event loop's thread (see the module docstring).
    immediate_intents: ClassVar[bool] = True

    def __init__(
        self,
        connection: sqlite3.Connection,
        executor: ThreadPoolExecutor,
        clock: Clock,
        marks: SentMarks | None = None,
    ):
        self._db = connection
        self._executor = executor
        self._marks = marks
        # Held by whoever uses the connection: the writer thread's batch, a read, or an
        # order intent committed on the loop's thread.
        self._connection = asyncio.Lock()
        self._clock = clock
        self._pending: list[Write] = []
        self._flusher: asyncio.Task[None] | None = None
        self._closed = False
        #: The jobs claimed through this journal, decoded, with their stored bytes: a
        #: write reads its row again, and the job would be decoded (and checked) each
        #: time. Used only while the row holds those very bytes; touched only by whoever
        #: holds the connection.
        self._jobs: dict[str, tuple[bytes, ShipmentJob]] = {}

    @classmethod
    async def open(cls, path: str | Path, *, clock: Clock | None = None) -> Self:
        """Open (or create) the journal at ``path``; fails if another process has it open."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-journal")
        clock = clock or SystemClock()
        loop = asyncio.get_running_loop()
        name = str(path)
        # What the previous run had sent (see _sent_marks); a journal in memory has none.
        marks_path = None if name == ":memory:" else f"{name}-sent"
        boot = boot_id() if marks_path is not None else None
        run = uuid.uuid4().hex if boot is not None else None
        try:
            previous = None
            if marks_path is not None:
                previous = await loop.run_in_executor(executor, previous_marks, marks_path)
            opening = functools.partial(
                connect, name, clock.now(), previous=previous, run=run, boot=boot
            )
            db = await loop.run_in_executor(executor, opening)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        marks = None
        if marks_path is not None and run is not None and boot is not None:
            try:
                marks = SentMarks(marks_path, run=run, boot=boot)
            except OSError as exc:
                await loop.run_in_executor(executor, db.close)
                executor.shutdown(wait=False)
                raise JournalError(f"cannot write {marks_path}: {exc.strerror or exc}") from None
        return cls(db, executor, clock, marks)

    # -- the Journal protocol ------------------------------------------------------------

    async def add(self, jobs: Sequence[ShipmentJob]) -> list[JobRecord]:
        now = self._stamp()
        rows = [
            (job.key, job.account, JobState.PENDING.value, JOB_ENCODER.encode(job), b"{}", now)
            for job in jobs
        ]
        # A job added now is not decoded back: the record takes the job given (only if
        # the row holds exactly its bytes: a key added before keeps its stored job).
        known = {job.key: (row[3], job) for job, row in zip(jobs, rows, strict=True)}

        def insert(db: sqlite3.Connection) -> list[JobRecord]:
            db.executemany(
                "INSERT OR IGNORE INTO jobs (key, account, state, job, facts, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )
            keys = [r[0] for r in rows]
            found = {record.key: record for record in select_keys(db, keys, known)}
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
        exclude: Collection[str] = (),
        accounts: Mapping[str, int] | None = None,
    ) -> list[JobRecord]:
        now = self._clock.now()
        left_out = set(exclude)
        # (account, how many) to pick: one account's share after another, one transaction.
        shares: list[tuple[str | None, int]] = (
            [(account, limit)] if accounts is None else list(accounts.items())
        )

        def pick(db: sqlite3.Connection, account: str | None, room: int) -> list[JobRecord]:
            states = [state.value for state in WORKABLE_STATES]
            where = f"(state IN ({placeholders(states)})"
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
            chunks: list[Sequence[str] | None] = [None] if keys is None else [*key_chunks(keys)]
            for chunk in chunks:
                left = room - len(claimed)
                if left <= 0:
                    break
                sql, args = where, list(params)
                if chunk is not None:
                    sql += f" AND key IN ({placeholders(chunk)})"
                    args.extend(chunk)
                rows = db.execute(
                    f"SELECT {COLUMNS} FROM jobs WHERE {sql} ORDER BY seq LIMIT ?",
                    [*args, left + len(left_out)],
                ).fetchall()
                # Rows are left out before they are decoded: a job is most of a row's cost.
                mine = [row for row in rows if row[0] not in left_out][:left]
                for row in mine:
                    record = claim_row(db, to_record(row), worker_id, now, lease)
                    self._keep(record, row[3])
                    claimed.append(record)
            return claimed

        def take(db: sqlite3.Connection) -> list[JobRecord]:
            expire_orders(db, now, exclude=left_out)
            claimed: list[JobRecord] = []
            for name, share in shares:
                room = min(share, limit - len(claimed))
                if room > 0:
                    claimed.extend(pick(db, name, room))
            return claimed

        return await self._write(take)

    async def claimed_by(
        self,
        worker_id: str,
        *,
        limit: int,
        keys: Sequence[str] | None = None,
        account: str | None = None,
        exclude: Collection[str] = (),
    ) -> list[JobRecord]:
        """Workable jobs leased to ``worker_id`` whose lease is live, outside ``exclude``
        (as :meth:`PostgresJournal.claimed_by <shipping_async.scaleout.PostgresJournal>`)."""
        now = self._clock.now().timestamp()
        wanted = None if keys is None else set(keys)
        left_out = set(exclude)

        def read(db: sqlite3.Connection) -> list[JobRecord]:
            states = [state.value for state in WORKABLE_STATES]
            rows = db.execute(
                f"SELECT {COLUMNS} FROM jobs WHERE lease_owner = ? AND claim_token IS NOT NULL "
                f"AND lease_until > ? AND state IN ({placeholders(states)}) ORDER BY seq",
                [worker_id, now, *states],
            )
            return [
                to_record(row)
                for row in rows
                if (account is None or row[1] == account)
                and (wanted is None or row[0] in wanted)
                and row[0] not in left_out
            ][:limit]

        return await self._read(read)

    async def renew(self, claims: Mapping[str, str], *, lease: float) -> set[str]:
        now = self._clock.now()
        pairs = list(claims.items())

        def extend(db: sqlite3.Connection) -> set[str]:
            # The token alone decides: a lapsed lease nobody claimed since is taken back.
            db.executemany(
                "UPDATE jobs SET lease_until = ? WHERE key = ? AND claim_token = ?",
                [(now.timestamp() + lease, key, token) for key, token in pairs],
            )
            return held_keys(db, pairs)

        return await self._write(extend)

    async def release(self, claims: Mapping[str, str]) -> None:
        pairs = list(claims.items())

        def drop(db: sqlite3.Connection) -> None:
            for key, _ in pairs:
                self._jobs.pop(key, None)
            db.executemany(
                "UPDATE jobs SET lease_owner = NULL, lease_until = NULL, claim_token = NULL "
                "WHERE key = ? AND claim_token = ?",
                pairs,
            )

        await self._write(drop)

    async def reconcile(
        self, key: str, *, order_id: int | None, evidence: str | None = None
    ) -> JobRecord:
        now = self._stamp()

        def settle(db: sqlite3.Connection) -> JobRecord:
            record = select_one(db, key)
            if record.state is not JobState.UNKNOWN:
                raise not_unknown(key, record.state)
            fields: JobFields = {**NO_ERROR, "order_id": order_id, "evidence": evidence}
            state = reconciled_state(order_id)
            return store_state(db, record, state, fields, now, lease=NO_LEASE)

        return await self._write(settle)

    async def get(self, key: str) -> JobRecord | None:
        def read(db: sqlite3.Connection) -> JobRecord | None:
            rows = select_keys(db, [key])
            return rows[0] if rows else None

        return await self._read(read)

    async def records(
        self, *, states: Collection[JobState] | None = None
    ) -> AsyncIterator[JobRecord]:
        wanted = [state.value for state in states] if states is not None else None
        after = 0
        while True:
            page = await self._read(functools.partial(read_page, after=after, states=wanted))
            for _, record in page:
                yield record
            if len(page) < CHUNK:
                return
            after = page[-1][0]

    async def order_intent_ages(self, *, within: float, account: str | None = None) -> list[float]:
        return await self._read(functools.partial(intent_ages, within=within, account=account))

    async def accounts_with_work(self, *, retry_failed: bool = False) -> list[str]:
        """Accounts that have jobs not finished yet (leased or not)."""
        unfinished = [state.value for state in JobState if state not in FINISHED_STATES]

        def read(db: sqlite3.Connection) -> list[str]:
            sql = f"SELECT DISTINCT account FROM jobs WHERE state IN ({placeholders(unfinished)})"
            params: list[Any] = [*unfinished]
            if retry_failed:
                sql += " OR (state = ? AND retryable = 1)"
                params.append(JobState.FAILED.value)
            return [row[0] for row in db.execute(sql + " ORDER BY account", params)]

        return await self._read(read)

    async def record_order_received(self, order_ids: Sequence[int]) -> int:
        """Record ``order_received`` evidence (see :mod:`shipping_async.bulk.evidence`)."""
        if not order_ids:
            return 0
        return await self._write(
            functools.partial(insert_events, order_ids=list(order_ids), stamp=(wall_stamp(),))
        )

    async def order_received(
        self, *, since: datetime, until: datetime | None = None
    ) -> list[OrderEvidence]:
        """Evidence first received within ``[since, until]`` (host wall clock)."""
        return await self._read(
            functools.partial(
                select_events,
                since=wall_stamp(since),
                until=None if until is None else wall_stamp(until),
            )
        )

    async def evidence_now(self) -> datetime:
        """The host's wall clock: the clock of order intents in a SQLite journal."""
        return datetime.now(UTC)

    async def counts(self) -> dict[JobState, int]:
        def count(db: sqlite3.Connection) -> dict[JobState, int]:
            found: dict[JobState, int] = dict.fromkeys(JobState, 0)
            sql = "SELECT state, COUNT(*), MIN(key) FROM jobs GROUP BY state"
            for state, count, key in db.execute(sql):
                found[read_column(key, "state", JobState, state)] = int(count)
            return found

        return await self._read(count)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._flusher is not None:
            await asyncio.shield(self._flusher)
        loop = asyncio.get_running_loop()
        async with self._connection:
            await loop.run_in_executor(self._executor, self._db.close)
        if self._marks is not None:
            self._marks.close()
        self._executor.shutdown(wait=True)

    # -- the writer ----------------------------------------------------------------------

    def _keep(self, record: JobRecord, raw_job: bytes) -> None:
        if len(self._jobs) >= _KEPT_JOBS:  # claims never settled here (a bug elsewhere)
            self._jobs.clear()
        self._jobs[record.key] = (raw_job, record.job)

    def _stamp(self) -> str:
        return self._clock.now().isoformat()

    async def _update(
        self,
        token: str,
        key: str,
        state: JobState,
        fields: JobFields,
        *,
        keep_lease: bool,
        require: JobState | None = None,
    ) -> JobRecord:
        now = self._clock.now()

        def change(db: sqlite3.Connection) -> JobRecord:
            record = select_one(db, key, self._jobs)
            if record.claim_token is None or record.claim_token != token:
                raise lease_lost(key)
            expiry = record.lease_until
            if state is JobState.ORDERING and (expiry is None or expiry <= now):
                raise lease_lapsed(key)
            if require is not None and record.state is not require:
                raise wrong_state(key, record.state, state, require)
            lease: Lease = NO_LEASE
            if keep_lease:
                until = expiry.timestamp() if expiry is not None else None
                lease = (record.lease_owner, until, token)
            else:
                self._jobs.pop(key, None)  # finished: no write under this claim follows
            return store_state(db, record, state, fields, now.isoformat(), lease=lease)

        if state is JobState.ORDERING:
            record = await self._write_here(change)
            # Committed (fsync done); its request is written right after this returns.
            self._note_sent(record)
            return record
        if require is JobState.ORDERING:  # taking the intent back
            record = await self._write_here(change)
        else:
            record = await self._write(change)
        if self._marks is not None:
            self._marks.answered(key)
        return record

    def _note_sent(self, record: JobRecord) -> None:
        if self._marks is None or record.order_intent_at is None:
            return
        try:
            self._marks.note(record.key, wall_stamp(record.order_intent_at))
        except OSError as exc:
            raise JournalError(
                f"cannot write the journal's sent marks ({exc.strerror or exc}); "
                f"job {record.key!r} was not sent"
            ) from None

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise JournalError("the journal is closed")
        async with self._connection:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn, self._db)

    async def _write_here(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Commit ``fn`` alone on the loop's thread once the connection is free.

        For the order intent: its request is written right after this returns, and
        between the commit and that write nothing else may run (no other task, no
        wake-up from the writer thread, which a loaded machine can delay by tens of
        milliseconds). Its withdrawal after a 429 likewise, so that a crash right after
        the answer finds the job quoted. One fsync each; other writes keep their group
        commit.
        """
        if self._closed:
            raise JournalError("the journal is closed")
        async with self._connection:
            if self._closed:
                raise JournalError("the journal is closed")
            # No await from here on; a cancellation lands before the commit or not at all.
            try:
                return commit_one(self._db, fn)
            except sqlite3.Error as exc:
                raise JournalError(
                    f"the journal file cannot be written ({exc}): make room or fix its "
                    "permissions, then resume"
                ) from None

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
                async with self._connection:
                    outcomes = await loop.run_in_executor(
                        self._executor, commit_batch, self._db, batch
                    )
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the commit itself failed: nobody's write stands
                # (The file cannot be written: disk full, read-only, locked.) Each writer
                # hears it; writes queued meanwhile get their own attempt, so none waits
                # forever, and close() does not raise it again.
                failure = JournalError(
                    f"the journal file cannot be written ({exc}): make room or fix its "
                    "permissions, then resume"
                )
                for _, future in batch:
                    if not future.done():
                        future.set_exception(failure)
                continue
            for (_, future), (ok, value) in zip(batch, outcomes, strict=True):
                if future.done():
                    continue
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)
