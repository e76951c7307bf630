"""The SQLite journal: the default store, one file used by one process at a time.

Why stdlib ``sqlite3`` and a thread of our own rather than ``aiosqlite``: aiosqlite is a
thread per connection fed by a queue, so it would add a dependency and no capability,
and it would run every statement on that thread. Here writes are *group-committed*:
every write queued while a commit is running goes into the next transaction, and every
caller is answered only after that transaction is on disk. One fsync then serves dozens
of jobs, so ``synchronous=FULL`` (durable across a power cut, not only a crash) costs
little at thousands of jobs per minute. The statements of a batch run on the event
loop's thread (a few microseconds each: a thread switch per statement would cost more),
and only the commit and its fsync on the writer thread. A write under a claim starts
from the record the journal keeps for it (see :mod:`~shipping_async.bulk._sqlite_moves`):
one fenced ``UPDATE``, no row read back.

The order intent (``begin_order``) is group-committed like every other write: the
intents of the orders that are ready together (a burst at a window's start, a run whose
limit is lifted) share one fsync instead of blocking the event loop for one each. Its
request follows once the commit is on disk, and right before the request's first byte,
with nothing run in between, :meth:`SQLiteJournal.sending` appends the intent's sent
mark: a crash anywhere before that line leaves an intent that a resumed run on the same
boot knows was never sent (see :mod:`shipping_async._send_gate` and
:mod:`~shipping_async.bulk._sent_marks`). Its withdrawal (after a 429, a refusal) is
committed at once on the loop's thread, so that a crash right after the answer finds the
job quoted.

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
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

import msgspec

from shipping_async.bulk._journal_store import (
    IN_THE_ORDER,
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
from shipping_async.bulk._sent_marks import SentMarks, boot_id, mark_sent, previous_marks
from shipping_async.bulk._sqlite_evidence import insert_events, select_events
from shipping_async.bulk._sqlite_moves import claim_kept, move
from shipping_async.bulk._sqlite_rows import (
    CHUNK,
    NO_LEASE,
    Lease,
    claim_row,
    connect,
    expire_orders,
    held_keys,
    in_savepoint,
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
from shipping_async.bulk._sqlite_schema import COLUMNS, JOBS
from shipping_async.bulk._sqlite_writer import SQLiteWriter
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


#: Claimed jobs kept decoded at most (far above any run's jobs in flight).
_KEPT_JOBS = 20_000


class SQLiteJournal(JournalStore):
    """A :class:`~shipping_async.bulk.journal.Journal` in one SQLite file.

    Example::

        async with await SQLiteJournal.open("batch.journal") as journal:
            records = await journal.add(jobs)
    """

    def __init__(
        self,
        connection: sqlite3.Connection,
        executor: ThreadPoolExecutor,
        clock: Clock,
        marks: SentMarks | None = None,
    ):
        self._writer = SQLiteWriter(connection, executor, self._forget)
        self._marks = marks
        self._clock = clock
        #: Jobs added or claimed through this journal, decoded, with their stored bytes:
        #: a claim takes the job from here instead of decoding (and checking) it again,
        #: only when the row holds those very bytes.
        self._jobs: dict[str, tuple[bytes, ShipmentJob]] = {}
        #: The record of every job claimed through this journal and still leased, exactly
        #: as its row holds it: a write under the claim starts from it instead of reading
        #: the row (see :mod:`~shipping_async.bulk._sqlite_moves`). Every write keeps it
        #: exact, on the event loop's thread; a failed commit forgets it all.
        self._held: dict[str, JobRecord] = {}
        #: Intents committed whose request is not sent yet (key -> the intent's stamp, as
        #: its sent mark says it): :meth:`sending` marks them.
        self._unsent: dict[str, str] = {}

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
        at = self._clock.now()
        now = at.isoformat()
        rows = [(job.key, job.account, JobState.PENDING.value, b"{}", now) for job in jobs]
        inputs = [(JOB_ENCODER.encode(job), job.key) for job in jobs]
        # A job added now is not decoded back: the record takes the job given (only if
        # the row holds exactly its bytes: a key added before keeps its stored job).
        known = {job.key: (raw, job) for job, (raw, _) in zip(jobs, inputs, strict=True)}

        def insert(db: sqlite3.Connection) -> list[JobRecord]:
            cursor = db.executemany(
                "INSERT OR IGNORE INTO jobs (key, account, state, facts, updated_at) "
                "VALUES (?, ?, ?, ?, ?)",
                rows,
            )
            # A key known before keeps its input (and its row: it was ignored above).
            db.executemany(
                "INSERT OR IGNORE INTO job_inputs (seq, job) SELECT seq, ? FROM jobs WHERE key = ?",
                inputs,
            )
            if cursor.rowcount == len(rows):  # every job is new: its record is as given
                records = [
                    JobRecord(
                        key=job.key,
                        job=job,
                        state=JobState.PENDING,
                        account=job.account,
                        updated_at=at,
                    )
                    for job in jobs
                ]
            else:
                keys = [r[0] for r in rows]
                found = {record.key: record for record in select_keys(db, keys, known)}
                records = [found[row[0]] for row in rows]
            self._keep_jobs(known)
            return records

        return await self._writer.write(insert)

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

        jobs: dict[str, tuple[bytes, ShipmentJob]] = {}  # the claimed jobs, to keep

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
                query = f"SELECT {COLUMNS} FROM {JOBS} WHERE {sql} ORDER BY j.seq LIMIT ?"
                rows = db.execute(query, [*args, left]).fetchall()
                # Rows are left out before they are decoded: a job is most of a row's cost.
                mine = [row for row in rows if row[0] not in left_out]
                if len(mine) < len(rows) == left:
                    # A job left out took a row (its lease lapsed while its task works):
                    # ask again with room for them all. Live leases never match.
                    rows = db.execute(query, [*args, left + len(left_out)]).fetchall()
                    mine = [row for row in rows if row[0] not in left_out][:left]
                records = [to_record(row, job=self._kept_job(row[0], row[3])) for row in mine]
                failed = JobState.FAILED
                leased = iter(
                    claim_kept(
                        db, [r for r in records if r.state is not failed], worker_id, now, lease
                    )
                )
                # A failed job starts again at its next stage, its error cleared.
                claimed.extend(
                    claim_row(db, record, worker_id, now, lease)
                    if record.state is failed
                    else next(leased)
                    for record in records
                )
                for row, record in zip(mine, records, strict=True):
                    jobs[row[0]] = (row[3], record.job)
            return claimed

        def take(db: sqlite3.Connection) -> list[JobRecord]:
            jobs.clear()
            gone = expire_orders(db, now, exclude=left_out)
            claimed: list[JobRecord] = []
            for name, share in shares:
                room = min(share, limit - len(claimed))
                if room > 0:
                    claimed.extend(pick(db, name, room))
            # Kept once every statement went through (a refusal undoes them all).
            for key in gone:
                self._held.pop(key, None)
            self._keep_jobs(jobs)
            self._held.update((record.key, record) for record in claimed)
            return claimed

        return await self._writer.write(take)

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
                f"SELECT {COLUMNS} FROM {JOBS} WHERE lease_owner = ? AND claim_token IS NOT NULL "
                f"AND lease_until > ? AND state IN ({placeholders(states)}) ORDER BY j.seq",
                [worker_id, now, *states],
            )
            return [
                to_record(row)
                for row in rows
                if (account is None or row[1] == account)
                and (wanted is None or row[0] in wanted)
                and row[0] not in left_out
            ][:limit]

        return await self._writer.read(read)

    async def renew(self, claims: Mapping[str, str], *, lease: float) -> set[str]:
        now = self._clock.now()
        pairs = list(claims.items())
        tokens = dict(pairs)

        def extend(db: sqlite3.Connection) -> set[str]:
            # The token alone decides: a lapsed lease nobody claimed since is taken back.
            until = now.timestamp() + lease
            db.executemany(
                "UPDATE jobs SET lease_until = ? WHERE key = ? AND claim_token = ?",
                [(until, key, token) for key, token in pairs],
            )
            held = held_keys(db, pairs)
            lease_until = datetime.fromtimestamp(until, UTC)
            for key in held:
                record = self._held.get(key)
                if record is not None and record.claim_token == tokens[key]:
                    self._held[key] = msgspec.structs.replace(record, lease_until=lease_until)
            return held

        return await self._writer.write(extend)

    async def release(self, claims: Mapping[str, str]) -> None:
        pairs = list(claims.items())

        def drop(db: sqlite3.Connection) -> None:
            for key, _ in pairs:
                self._jobs.pop(key, None)
                self._held.pop(key, None)
            db.executemany(
                "UPDATE jobs SET lease_owner = NULL, lease_until = NULL, claim_token = NULL "
                "WHERE key = ? AND claim_token = ?",
                pairs,
            )

        await self._writer.write(drop)

    async def reconcile(
        self, key: str, *, order_id: int | None, evidence: str | None = None
    ) -> JobRecord:
        now = self._stamp()

        def settle(db: sqlite3.Connection) -> JobRecord:
            self._held.pop(key, None)  # unknown jobs are not leased; this one no more
            record = select_one(db, key)
            if record.state is not JobState.UNKNOWN:
                raise not_unknown(key, record.state)
            fields: JobFields = {**NO_ERROR, "order_id": order_id, "evidence": evidence}
            state = reconciled_state(order_id)
            return store_state(db, record, state, fields, now, lease=NO_LEASE)

        return await self._writer.write(settle)

    async def get(self, key: str) -> JobRecord | None:
        def read(db: sqlite3.Connection) -> JobRecord | None:
            rows = select_keys(db, [key])
            return rows[0] if rows else None

        return await self._writer.read(read)

    async def records(
        self, *, states: Collection[JobState] | None = None
    ) -> AsyncIterator[JobRecord]:
        wanted = [state.value for state in states] if states is not None else None
        after = 0
        while True:
            page = await self._writer.read(functools.partial(read_page, after=after, states=wanted))
            for _, record in page:
                yield record
            if len(page) < CHUNK:
                return
            after = page[-1][0]

    async def order_intent_ages(self, *, within: float, account: str | None = None) -> list[float]:
        return await self._writer.read(
            functools.partial(intent_ages, within=within, account=account)
        )

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

        return await self._writer.read(read)

    async def record_order_received(self, order_ids: Sequence[int]) -> int:
        """Record ``order_received`` evidence (see :mod:`shipping_async.bulk.evidence`)."""
        if not order_ids:
            return 0
        return await self._writer.write(
            functools.partial(insert_events, order_ids=list(order_ids), stamp=(wall_stamp(),))
        )

    async def order_received(
        self, *, since: datetime, until: datetime | None = None
    ) -> list[OrderEvidence]:
        """Evidence first received within ``[since, until]`` (host wall clock)."""
        return await self._writer.read(
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

        return await self._writer.read(count)

    async def close(self) -> None:
        if self._writer.closed:
            return
        await self._writer.close()
        if self._marks is not None:
            self._marks.close()

    @property
    def _db(self) -> sqlite3.Connection:
        return self._writer.db

    # -- the writer ----------------------------------------------------------------------

    def _kept_job(self, key: str, raw_job: bytes) -> ShipmentJob | None:
        """The job kept for ``key`` if the row holds exactly its bytes (else decode it)."""
        kept = self._jobs.get(key)
        return kept[1] if kept is not None and kept[0] == raw_job else None

    def _keep_jobs(self, jobs: Mapping[str, tuple[bytes, ShipmentJob]]) -> None:
        if len(self._jobs) + len(jobs) > _KEPT_JOBS:  # added, never claimed: start over
            self._jobs.clear()
        self._jobs.update(jobs)

    def _forget(self) -> None:
        """A commit failed: what was kept may be ahead of the file."""
        self._jobs.clear()
        self._held.clear()

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
        require: Collection[JobState] | None = None,
    ) -> JobRecord:
        now = self._clock.now()
        # The intent's real time, and its text as stored and as its sent mark says it.
        intent = None
        if state is JobState.ORDERING:
            at = datetime.now(UTC)
            intent = (at, wall_stamp(at))

        def read_and_change(db: sqlite3.Connection) -> JobRecord:
            # The row read first: to say why a kept record did not match, or for a job
            # this journal does not hold (claimed before a failed commit).
            record = select_one(db, key, self._jobs)
            if record.claim_token is None or record.claim_token != token:
                raise lease_lost(key)
            expiry = record.lease_until
            if state is JobState.ORDERING and (expiry is None or expiry <= now):
                raise lease_lapsed(key)
            if require is not None and record.state not in require:
                raise wrong_state(key, record.state, state, require)
            lease: Lease = NO_LEASE
            if keep_lease:
                until = expiry.timestamp() if expiry is not None else None
                lease = (record.lease_owner, until, token)
            stamp = None if intent is None else intent[1]
            return store_state(
                db, record, state, fields, now.isoformat(), lease=lease, intent_stamp=stamp
            )

        def change(db: sqlite3.Connection) -> JobRecord:
            # Atomic: either one fenced UPDATE went through, or read_and_change runs in a
            # savepoint of its own.
            current = self._held.get(key)
            record = None
            if current is not None and current.claim_token == token:
                record = move(
                    db,
                    current,
                    state,
                    fields,
                    now,
                    keep_lease=keep_lease,
                    require=require,
                    intent=intent,
                )
            if record is None:
                record = in_savepoint(db, read_and_change)
            if keep_lease:
                self._held[key] = record
            else:  # finished: no write under this claim follows
                self._held.pop(key, None)
                self._jobs.pop(key, None)
            return record

        if require == IN_THE_ORDER:  # taking the intent back
            record = await self._writer.write_now(change)
        else:
            record = await self._writer.write(change, atomic=True)
        if self._marks is not None:
            if intent is not None:  # committed (fsync done): sending() marks it
                self._unsent[key] = intent[1]
            else:
                self._unsent.pop(key, None)
                self._marks.answered(key)
        return record

    def sending(self, key: str) -> None:
        """Append the sent mark of ``key``'s intent (committed by :meth:`begin_order`):
        its request's first byte follows at once (see the module docstring)."""
        if self._marks is not None:
            mark_sent(self._marks.note, self._unsent, key)
