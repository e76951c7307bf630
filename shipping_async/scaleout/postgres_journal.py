"""The PostgreSQL journal: one table of jobs that many workers on many hosts share safely.

It implements :class:`~shipping_async.bulk.journal.Journal` (read it for the states and
rules). What sharing adds:

- ``claim`` locks candidate rows with ``SELECT ... FOR UPDATE SKIP LOCKED``: concurrent
  workers never wait for each other and never get the same job. A job stays leased until
  ``lease_until``; a worker that dies stops renewing, and after its lease any worker takes
  the job over from the state it reached.
- Every claim sets a new ``claim_token`` (``gen_random_uuid()``) and every write is an
  ``UPDATE ... WHERE key = $key AND claim_token = $token``: a task whose claim went stale
  (even one of the same worker) changes nothing. Writes of many jobs that arrive together
  go as one statement, one commit (:mod:`~shipping_async.scaleout._pg_writes`); the
  order intent goes alone, at once. ``begin_order`` adds ``state =
  'quoted' AND lease_until > now()``: the order step is claimed and the intent recorded in
  the same statement, so of two tasks that both think they own a job, at most one sends.
- A job found in ``ordering`` whose lease ran out had its worker die with POST /orders
  possibly on the wire: ``claim`` turns it into ``unknown`` (listed by
  :meth:`~PostgresJournal.needs_reconciliation`), never re-sends it.

Leases run on the database's clock (``now()``), the one clock every worker shares. With a
:class:`~shipping_async.clock.ScaledClock` (a sandbox run), lease seconds are the clock's
and last ``1 / speed`` as long in real time, like every other duration of the run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Self

import asyncpg
import msgspec

from shipping_async._cleartext import warn_if_cleartext
from shipping_async.bulk._journal_store import (
    DIED_MID_ORDER,
    IN_THE_ORDER,
    JOB_DECODER,
    JOB_ENCODER,
    JOB_FIELDS,
    JournalStore,
    lease_lapsed,
    lease_lost,
    no_such_job,
    not_unknown,
    read_column,
    reconciled_state,
    wrong_state,
)
from shipping_async.bulk._outage import unreachable
from shipping_async.bulk._pg_evidence import database_now, record_events, select_events
from shipping_async.bulk._sent_marks import mark_sent
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
from shipping_async.clock import Clock
from shipping_async.scaleout._pg_schema import LATEST_VERSION, migrate, quote_ident
from shipping_async.scaleout._pg_sent_marks import LocalMarks, journal_name
from shipping_async.scaleout._pg_writes import GroupCommit, encode_items, update_sql, write_item

__all__ = ["PostgresJournal"]

_log = logging.getLogger("shipping_async")

DEFAULT_SCHEMA = "shipping_async"

_COLUMNS = (
    "key, account, state, job, quote_id, estimate_id, carrier, service, cost, currency, hub, "
    "order_id, waybills, pickup_confirmation, pickup_date, pickup_from, pickup_to, error, "
    "error_stage, retryable, evidence, attempts, lease_owner, lease_until, order_intent_at, "
    "updated_at, claim_token"
)
_J_COLUMNS = ", ".join(f"j.{column.strip()}" for column in _COLUMNS.split(","))  # claim's alias
_PAGE = 500
#: Claimed records kept to answer writes without reading the row back; past this many
#: (claims never written nor released), the cache starts again and writes read rows.
_HELD_MAX = 10_000
_WORKABLE = sorted(state.value for state in WORKABLE_STATES)
_UNFINISHED = sorted(state.value for state in JobState if state not in FINISHED_STATES)
#: The pools keep no floor of connections (``min_size=0``): a connection a crash cut is
#: replaced when next needed, where the run waits the outage out, rather than by asyncpg's
#: background task, which logs a traceback for every failed attempt.
#: Bounds on a connection that stops answering (real seconds): a host that is gone (a
#: failover, a cut cable) surfaces as a timeout, which the run waits out as an outage
#: (:mod:`shipping_async.bulk._outage`), instead of hanging a worker.
_LIVENESS = {"timeout": 10.0, "command_timeout": 30.0}
#: Connections the writes keep between statements (see PostgresJournal._write_rows).
_WRITERS_KEPT = 3


async def _keep_session(_: asyncpg.Connection) -> None:
    """The pool's reset of a released connection: nothing to do.

    The journal keeps no session state (no SET, LISTEN, cursor or session advisory lock;
    the schema lock is transaction-scoped), so asyncpg's default reset (``SELECT
    pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL``) would only cost one round
    trip and one transaction after every journal call: half of all the journal's
    transactions under load. asyncpg still rolls back a transaction left open.
    """


class PostgresJournal(JournalStore):
    """A :class:`~shipping_async.bulk.journal.Journal` in PostgreSQL, for many workers.

    Example::

        journal = await PostgresJournal.open("postgresql://db.internal/shipping")
        async with journal:
            await journal.add(jobs)

    Tables live in ``schema`` (default ``shipping_async``), created and migrated by
    :meth:`open` (or ``shipping-async journal init``).
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        schema: str,
        *,
        clock: Clock | None = None,
        lease_pool: asyncpg.Pool | None = None,
        marks: LocalMarks | None = None,
    ) -> None:
        self._pool = pool
        # This process's sent marks, and those of gone processes (see _pg_sent_marks).
        self._marks = marks
        #: Intents committed whose request is not sent yet: key -> the intent's stamp.
        self._unsent: dict[str, str] = {}
        # Lease renewals on a connection of their own: never queued behind job writes
        # waiting for a connection of ``pool`` (a lapsed lease stops a job mid-way).
        self._lease_pool = lease_pool or pool
        self.schema = schema
        # Clock seconds per real second: leases run on the database's real clock.
        self._speed = clock.from_real(1.0) if clock is not None else 1.0
        self._jobs = f"{quote_ident(schema)}.jobs"
        self._events = f"{quote_ident(schema)}.order_events"
        self._closed = False
        self._update_sql = update_sql(self._jobs)
        # Writes of many jobs in one statement; the order intents of a loop tick in one of
        # their own, never queued behind the other writes (see _update).
        self._writes: GroupCommit[dict[str, Any], Any] = GroupCommit(self._write_many)
        self._intents: GroupCommit[dict[str, Any], Any] = GroupCommit(self._write_many)
        # Connections the writes keep out of the pool between their statements, at most
        # this many: always fewer than the pool holds, so others never wait on them.
        self._writers: list[asyncpg.Connection] = []
        self._writers_kept = max(0, min(_WRITERS_KEPT, pool.get_max_size() - 1))
        # The record of each claim this journal handed out, as last written (key ->
        # record): a write returns only what the store set, the rest is known here.
        self._held: dict[str, JobRecord] = {}

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        clock: Clock | None = None,
        min_size: int = 0,
        max_size: int = 10,
        sent_marks: str | Path | None = None,
    ) -> Self:
        """Connect, create or migrate the schema, and return the journal.

        ``sent_marks``: a directory of this machine for the marks that tell a killed
        process's unsent order intents from those on the wire (see
        :mod:`~shipping_async.scaleout._pg_sent_marks`); ``None``: no marks, an intent
        left by a dead process is ``unknown``.
        """
        warn_if_cleartext(dsn)
        pool = await asyncpg.create_pool(
            dsn, min_size=min_size, max_size=max_size, reset=_keep_session, **_LIVENESS
        )
        try:
            lease_pool = await asyncpg.create_pool(
                dsn, min_size=0, max_size=1, reset=_keep_session, **_LIVENESS
            )
        except BaseException:
            await pool.close()
            raise
        try:
            async with pool.acquire() as connection:
                await migrate(connection, schema)
                newest = await connection.fetchval(
                    f"SELECT max(version) FROM {quote_ident(schema)}.schema_version"
                )
        except BaseException:
            await pool.close()
            await lease_pool.close()
            raise
        if newest > LATEST_VERSION:
            await pool.close()
            await lease_pool.close()
            raise JournalError(
                f"journal schema {schema} is at version {newest}, newer than this "
                f"shipping-async knows ({LATEST_VERSION}): upgrade shipping-async"
            )
        marks = None
        if sent_marks is not None:
            try:
                # Off the loop: it reads the files of gone processes (up to 5 MiB each).
                marks = await asyncio.to_thread(
                    LocalMarks.open, Path(sent_marks), journal_name(dsn, schema)
                )
            except OSError as exc:
                await pool.close()
                await lease_pool.close()
                raise JournalError(
                    f"cannot write the sent marks in {sent_marks}: {exc.strerror or exc}"
                ) from None
        return cls(pool, schema, clock=clock, lease_pool=lease_pool, marks=marks)

    # -- the Journal protocol ------------------------------------------------------------

    async def add(self, jobs: Sequence[ShipmentJob]) -> list[JobRecord]:
        if not jobs:
            return []
        keys = [job.key for job in jobs]
        async with self._pool.acquire() as connection, connection.transaction():
            await connection.executemany(
                f"INSERT INTO {self._jobs} (key, account, state, job) VALUES ($1, $2, $3, $4) "
                "ON CONFLICT (key) DO NOTHING",
                [(job.key, job.account, JobState.PENDING.value, _json(job)) for job in jobs],
            )
            rows = await connection.fetch(
                f"SELECT {_COLUMNS} FROM {self._jobs} WHERE key = ANY($1)", keys
            )
        found = {row["key"]: _record(row) for row in rows}
        return [found[key] for key in keys]

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
        workable = (
            "(state = ANY($1::text[]) OR ($2 AND state = 'failed' AND retryable)) "
            "AND (lease_owner IS NULL OR lease_until <= now()) "
            "AND ($4::text[] IS NULL OR key = ANY($4)) AND NOT key = ANY($8::text[])"
        )
        shares: tuple[Any, ...] = ()
        if accounts is None:
            picked = (
                f"SELECT key FROM {self._jobs} WHERE {workable} "
                "AND ($3::text IS NULL OR account = $3) "
                "ORDER BY seq LIMIT $5 FOR UPDATE SKIP LOCKED"
            )
        else:
            # Each account's share in one statement: its oldest jobs, through the
            # (account, seq) index; the total still bounded by the limit.
            picked = (
                "SELECT p.key FROM unnest($9::text[], $10::int[]) AS a(account, share) "
                f"CROSS JOIN LATERAL (SELECT key FROM {self._jobs} "
                f"WHERE account = a.account AND {workable} "
                "ORDER BY seq LIMIT a.share FOR UPDATE SKIP LOCKED) AS p "
                "WHERE $3::text IS NULL LIMIT $5"
            )
            shares = (list(accounts), list(accounts.values()))
        if self._marks is not None:
            self._own(worker_id)
        async with self._pool.acquire() as connection, connection.transaction():
            if self._marks is not None:
                await self._settle_unsent(connection, self._marks, exclude)
            await self._expire_orders(connection, exclude)
            rows = await connection.fetch(
                f"""
                WITH picked AS ({picked})
                UPDATE {self._jobs} AS j SET
                    attempts = j.attempts + 1,
                    lease_owner = $6,
                    lease_until = now() + make_interval(secs => $7),
                    claim_token = gen_random_uuid()::text,
                    updated_at = now(),
                    -- a failed job goes on after the last step that succeeded:
                    -- JobRecord.next_stage, here to keep the claim one statement
                    state = CASE
                        WHEN j.state <> 'failed' THEN j.state
                        WHEN j.order_id IS NULL THEN 'pending'
                        WHEN cardinality(j.waybills) > 0 THEN 'waybilled'
                        ELSE 'ordered' END,
                    error = CASE WHEN j.state = 'failed' THEN NULL ELSE j.error END,
                    error_stage = CASE WHEN j.state = 'failed' THEN NULL ELSE j.error_stage END,
                    retryable = CASE WHEN j.state = 'failed' THEN false ELSE j.retryable END
                FROM picked WHERE j.key = picked.key
                RETURNING j.seq, {_J_COLUMNS}
                """,
                _WORKABLE,
                retry_failed,
                account,
                None if keys is None else list(keys),
                limit,
                worker_id,
                lease / self._speed,
                list(exclude),
                *shares,
            )
        return self._hold([_record(row) for row in sorted(rows, key=lambda row: row["seq"])])

    async def renew(self, claims: Mapping[str, str], *, lease: float) -> set[str]:
        # The token alone decides: a lapsed lease nobody claimed since is taken back.
        rows = await self._lease_pool.fetch(
            f"UPDATE {self._jobs} AS j SET lease_until = now() + make_interval(secs => $3) "
            "FROM unnest($1::text[], $2::text[]) AS c(key, token) "
            "WHERE j.key = c.key AND j.claim_token = c.token RETURNING j.key, j.lease_until",
            list(claims),
            list(claims.values()),
            lease / self._speed,
        )
        held = {row["key"]: row["lease_until"] for row in rows}
        for key in claims:
            record = self._held.get(key)
            if record is None:
                continue
            if key in held:
                self._held[key] = msgspec.structs.replace(record, lease_until=held[key])
            else:
                del self._held[key]
        return set(held)

    async def release(self, claims: Mapping[str, str]) -> None:
        for key in claims:
            self._held.pop(key, None)
        await self._pool.execute(
            f"UPDATE {self._jobs} AS j SET lease_owner = NULL, lease_until = NULL, "
            "claim_token = NULL FROM unnest($1::text[], $2::text[]) AS c(key, token) "
            "WHERE j.key = c.key AND j.claim_token = c.token",
            list(claims),
            list(claims.values()),
        )

    async def reconcile(
        self, key: str, *, order_id: int | None, evidence: str | None = None
    ) -> JobRecord:
        state = reconciled_state(order_id)
        row = await self._pool.fetchrow(
            f"UPDATE {self._jobs} SET state = $2, order_id = $3, error = NULL, "
            "error_stage = NULL, retryable = false, lease_owner = NULL, lease_until = NULL, "
            "claim_token = NULL, updated_at = now(), evidence = $4 "
            f"WHERE key = $1 AND state = 'unknown' RETURNING {_COLUMNS}",
            key,
            state.value,
            order_id,
            evidence,
        )
        if row is None:
            current = await self.get(key)
            if current is None:
                raise no_such_job(key)
            raise not_unknown(key, current.state)
        return _record(row)

    async def get(self, key: str) -> JobRecord | None:
        row = await self._pool.fetchrow(f"SELECT {_COLUMNS} FROM {self._jobs} WHERE key = $1", key)
        return None if row is None else _record(row)

    async def records(
        self, *, states: Collection[JobState] | None = None
    ) -> AsyncIterator[JobRecord]:
        wanted = None if states is None else [state.value for state in states]
        after = 0
        while True:
            rows = await self._pool.fetch(
                f"SELECT seq, {_COLUMNS} FROM {self._jobs} WHERE seq > $1 "
                "AND ($2::text[] IS NULL OR state = ANY($2)) ORDER BY seq LIMIT $3",
                after,
                wanted,
                _PAGE,
            )
            for row in rows:
                yield _record(row)
            if len(rows) < _PAGE:
                return
            after = rows[-1]["seq"]

    async def counts(self) -> dict[JobState, int]:
        totals = dict.fromkeys(JobState, 0)
        for per_state in (await self.counts_by_account()).values():
            for state, count in per_state.items():
                totals[state] += count
        return totals

    async def order_intent_ages(self, *, within: float, account: str | None = None) -> list[float]:
        # Measured on the database's clock, the one that stamped the intents.
        rows = await self._pool.fetch(
            "SELECT greatest(0, extract(epoch FROM now() - order_intent_at))::float8 AS age "
            f"FROM {self._jobs} WHERE order_intent_at > now() - make_interval(secs => $1) "
            "AND ($2::text IS NULL OR account = $2)",
            float(within),
            account,
        )
        return [row["age"] for row in rows]

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._writes.close()
            await self._intents.close()
            writers, self._writers = self._writers, []
            for connection in writers:
                await self._pool.release(connection)
            await self._pool.close()
            if self._lease_pool is not self._pool:
                await self._lease_pool.close()
            if self._marks is not None:
                self._marks.close()

    # -- evidence: order_received events (see shipping_async.bulk.evidence) --------------

    async def record_order_received(self, order_ids: Sequence[int]) -> int:
        """Record ``order_received`` evidence, stamped with the database's ``now()``."""
        return await record_events(self._pool, self._events, order_ids)

    async def order_received(
        self, *, since: datetime, until: datetime | None = None
    ) -> list[OrderEvidence]:
        """Evidence first received within ``[since, until]`` (the database's clock)."""
        owner = (
            f"(SELECT key FROM {self._jobs} j WHERE j.order_id = e.order_id ORDER BY seq LIMIT 1)"
        )
        return await select_events(self._pool, self._events, owner, since, until)

    async def evidence_now(self) -> datetime:
        """The database's ``now()``: the clock of order intents and evidence."""
        return await database_now(self._pool)

    # -- beyond the protocol: what many workers and the status command need --------------

    async def counts_by_account(self) -> dict[str, dict[JobState, int]]:
        """Jobs per state for each account (every state present, zeros included)."""
        rows = await self._pool.fetch(
            f"SELECT account, state, count(*) AS n FROM {self._jobs} GROUP BY account, state"
        )
        result: dict[str, dict[JobState, int]] = {}
        for row in rows:
            per_state = result.setdefault(row["account"], dict.fromkeys(JobState, 0))
            per_state[JobState(row["state"])] = row["n"]
        return dict(sorted(result.items()))

    async def accounts_with_work(self, *, retry_failed: bool = False) -> list[str]:
        """Accounts that have jobs not finished yet (leased or not)."""
        rows = await self._pool.fetch(
            f"SELECT DISTINCT account FROM {self._jobs} "
            "WHERE state = ANY($1::text[]) OR ($2 AND state = 'failed' AND retryable) "
            "ORDER BY account",
            _UNFINISHED,
            retry_failed,
        )
        return [row["account"] for row in rows]

    async def claimed_by(
        self,
        worker_id: str,
        *,
        limit: int,
        keys: Sequence[str] | None = None,
        account: str | None = None,
        exclude: Collection[str] = (),
    ) -> list[JobRecord]:
        """Workable jobs leased to ``worker_id`` whose lease is live, outside ``exclude``:
        after a claim's connection died, what it had committed (the outage guard adopts
        them rather than letting them wait out their lease)."""
        rows = await self._pool.fetch(
            f"SELECT {_COLUMNS} FROM {self._jobs} "
            "WHERE lease_owner = $1 AND claim_token IS NOT NULL AND lease_until > now() "
            "AND state = ANY($2::text[]) AND ($3::text IS NULL OR account = $3) "
            "AND ($4::text[] IS NULL OR key = ANY($4)) AND NOT key = ANY($5::text[]) "
            "ORDER BY seq LIMIT $6",
            worker_id,
            _WORKABLE,
            account,
            None if keys is None else list(keys),
            list(exclude),
            limit,
        )
        return self._hold([_record(row) for row in rows])

    # -- internals -----------------------------------------------------------------------

    def _own(self, worker_id: str) -> None:
        assert self._marks is not None
        try:
            self._marks.own(worker_id)
        except OSError as exc:
            raise JournalError(
                f"cannot write the journal's sent marks ({exc.strerror or exc}); nothing claimed"
            ) from None

    async def _settle_unsent(
        self, connection: Any, marks: LocalMarks, exclude: Collection[str]
    ) -> None:
        """Lapsed intents of gone processes of this machine that were never sent go back
        to ``quoted`` (see :mod:`~shipping_async.scaleout._pg_sent_marks`)."""
        workers = marks.gone_workers
        if not workers:  # every claim of a run whose machine left nothing to settle
            return
        rows = await connection.fetch(
            f"SELECT key, lease_owner, order_intent_at FROM {self._jobs} "
            "WHERE state = 'ordering' AND lease_owner = ANY($1::text[]) "
            "AND lease_until <= now() AND order_intent_at IS NOT NULL "
            "AND NOT key = ANY($2::text[]) FOR UPDATE SKIP LOCKED",
            workers,
            list(exclude),
        )
        unsent = marks.unsent(
            (row["key"], row["lease_owner"], _stamp(row["order_intent_at"])) for row in rows
        )
        if unsent:
            await connection.execute(
                f"UPDATE {self._jobs} SET state = 'quoted', lease_owner = NULL, "
                "lease_until = NULL, claim_token = NULL, updated_at = now() "
                "WHERE key = ANY($1::text[]) AND state = 'ordering'",
                unsent,
            )
            _log.info(
                "%d order intent(s) of a process gone on this machine were never sent; "
                "quoted again: %s",
                len(unsent),
                ", ".join(unsent[:5]),
            )
        still_open = await connection.fetch(
            f"SELECT DISTINCT lease_owner FROM {self._jobs} "
            "WHERE state = 'ordering' AND lease_owner = ANY($1::text[]) "
            "AND NOT key = ANY($2::text[])",
            workers,
            unsent,
        )
        marks.settled(row["lease_owner"] for row in still_open)

    async def _expire_orders(self, connection: Any, exclude: Collection[str] = ()) -> None:
        """Jobs left in ``ordering`` by a worker whose lease ran out become ``unknown``.

        Not those in ``exclude``: the claiming process is still working on them.
        """
        await connection.execute(
            f"""
            UPDATE {self._jobs} SET state = 'unknown', error = $1, error_stage = 'order',
                retryable = false, lease_owner = NULL, lease_until = NULL, claim_token = NULL,
                updated_at = now()
            WHERE key IN (
                SELECT key FROM {self._jobs}
                WHERE state = 'ordering' AND (lease_until IS NULL OR lease_until <= now())
                  AND NOT key = ANY($2::text[])
                FOR UPDATE SKIP LOCKED
            )
            """,
            DIED_MID_ORDER,
            list(exclude),
        )

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
        item = write_item(token, key, state, fields, keep_lease=keep_lease, require=require)
        if state is JobState.ORDERING:
            # Its send follows its commit: the intents of one loop tick (a window's burst)
            # go in one statement, behind no other write. A kill between the commit and
            # the first byte is told apart by the sent marks.
            outcome = await self._intents.submit(item)
        elif require == IN_THE_ORDER:
            # The withdrawal goes alone and at once, so that a crash right after the
            # answer finds the intent taken back (as the SQLite journal does).
            (outcome,) = await self._write_many([item])
        else:
            outcome = await self._writes.submit(item)
        if isinstance(outcome, BaseException):
            raise outcome
        if outcome is not None:
            if self._marks is not None:
                self._mark_written(key, state, outcome)
            record = self._written(token, key, state, fields, keep_lease, outcome)
            if record is not None:
                return record
            current = await self.get(key)  # written, but not a claim this journal made
            if current is not None:
                return current
        self._held.pop(key, None)
        current = await self.get(key)
        if current is None:
            raise no_such_job(key)
        if current.claim_token != token:
            raise lease_lost(key)
        if require is not None and current.state not in require:
            raise wrong_state(key, current.state, state, require)
        raise lease_lapsed(key)

    async def _write_many(self, items: list[dict[str, Any]]) -> list[Any]:
        """Each item's written row (``None``: refused), in one statement; when that fails
        for a reason of the data, each item alone (the error to its own caller).

        Items of the same job go in statements one after another, in their order (one
        statement updates a row once: two intents of one claim must not both win)."""
        if len({item["key"] for item in items}) < len(items):
            results: list[Any] = [None] * len(items)
            for indexes in _distinct_keys(items):
                outcomes = await self._write_many([items[index] for index in indexes])
                for index, result in zip(indexes, outcomes, strict=True):
                    results[index] = result
            return results
        try:
            rows = await self._write_rows(encode_items(items))
        except asyncpg.PostgresError as exc:
            if len(items) == 1 or unreachable(exc):
                raise
            alone: list[Any] = []
            for item in items:
                try:
                    alone.extend(await self._write_many([item]))
                except asyncpg.PostgresError as error:
                    if unreachable(error):
                        raise
                    alone.append(error)
            return alone
        written = {(row["key"], row["token"]): row for row in rows}
        return [written.get((item["key"], item["token"])) for item in items]

    async def _write_rows(self, items: str) -> list[Any]:
        """``update_sql`` on a connection the writes keep: ``Pool.fetch`` without the
        pool's own cost per call (~27 us of CPU: its acquire, and a task to release).

        The writes are most of the journal's statements (the intent alone is one per
        job), one batch and a few intents at a time. A connection that fails, or whose
        call is cancelled, goes back to the pool, which checks it, resets it or replaces
        it, as after ``Pool.fetch``; one found closed is handed back the same way.
        """
        writers = self._writers
        connection = writers.pop() if writers else await self._pool.acquire()
        while _closed(connection):
            await self._pool.release(connection)  # a no-op if asyncpg released it
            connection = writers.pop() if writers else await self._pool.acquire()
        try:
            rows: list[Any] = await connection.fetch(self._update_sql, items)
        except BaseException:
            await self._pool.release(connection)
            raise
        if len(writers) < self._writers_kept and not self._closed:
            writers.append(connection)
        else:
            await self._pool.release(connection)
        return rows

    def sending(self, key: str) -> None:
        """Append the sent mark of ``key``'s intent: its request's first byte follows."""
        if self._marks is not None:
            mark_sent(self._marks.note, self._unsent, key)

    def _mark_written(self, key: str, state: JobState, row: Any) -> None:
        assert self._marks is not None
        if state is JobState.ORDERING:
            self._unsent[key] = _stamp(row["order_intent_at"])
        else:  # answered, withdrawn or finished: its mark matters no more
            self._unsent.pop(key, None)
            self._marks.answered(key)

    def _hold(self, claimed: list[JobRecord]) -> list[JobRecord]:
        """Keep the records of claims handed out, for the writes under them."""
        if len(self._held) + len(claimed) > _HELD_MAX:
            self._held.clear()
        self._held.update((record.key, record) for record in claimed)
        return claimed

    def _written(
        self, token: str, key: str, state: JobState, fields: JobFields, keep: bool, row: Any
    ) -> JobRecord | None:
        """The record after a write, from the claim's record and what the store set."""
        before = self._held.get(key)
        if before is None or before.claim_token != token:
            return None
        changes: dict[str, Any] = {
            **fields,
            "state": state,
            "updated_at": row["updated_at"],
            "order_intent_at": row["order_intent_at"],
        }
        if not keep:
            changes.update(lease_owner=None, lease_until=None, claim_token=None)
        record = msgspec.structs.replace(before, **changes)
        if keep:
            self._held[key] = record
        else:
            del self._held[key]
        return record


def _distinct_keys(items: list[dict[str, Any]]) -> list[list[int]]:
    """The indexes of ``items`` in groups of distinct keys, in order: each item in the
    group after the last one that holds its key."""
    groups: list[list[int]] = []
    last: dict[str, int] = {}
    for index, item in enumerate(items):
        group = last.get(item["key"], -1) + 1
        if group == len(groups):
            groups.append([])
        groups[group].append(index)
        last[item["key"]] = group
    return groups


def _stamp(at: datetime) -> str:
    """An intent's stamp as its sent mark holds it."""
    return at.isoformat(timespec="microseconds")


def _closed(connection: Any) -> bool:
    try:
        return bool(connection.is_closed())
    except asyncpg.InterfaceError:  # asyncpg gave it back to the pool when it closed
        return True


def _json(job: ShipmentJob) -> str:
    return JOB_ENCODER.encode(job).decode()


def _record(row: Any) -> JobRecord:
    # Each of JOB_FIELDS is a column of the same name.
    facts = {name: row[name] for name in JOB_FIELDS}
    facts["waybills"] = list(row["waybills"])
    return JobRecord(
        key=row["key"],
        job=read_column(row["key"], "job", JOB_DECODER.decode, row["job"]),
        state=read_column(row["key"], "state", JobState, row["state"]),
        account=row["account"],
        attempts=row["attempts"],
        lease_owner=row["lease_owner"],
        claim_token=row["claim_token"],
        lease_until=row["lease_until"],
        order_intent_at=row["order_intent_at"],
        updated_at=row["updated_at"],
        **facts,
    )
