"""Rows of the SQLite journal: the connection, its transactions, and row <-> record."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import msgspec

from shipping_async.bulk._journal_store import (
    DIED_MID_ORDER,
    JOB_DECODER,
    JOB_ENCODER,
    JOB_FIELDS,
    NO_ERROR,
    new_token,
    no_such_job,
    read_column,
)
from shipping_async.bulk._sent_marks import PreviousMarks
from shipping_async.bulk._sqlite_schema import COLUMNS, JOBS, RETURNED, create, migrate
from shipping_async.bulk.jobs import ShipmentJob
from shipping_async.bulk.journal import (
    JobFields,
    JobRecord,
    JobState,
    JournalDataError,
    JournalError,
)

T = TypeVar("T")

CHUNK = 500  # keys per IN (...) list, well under SQLite's parameter limit


# The JobFields of a record but its order id (a column of its own), stored as one JSON
# object without its empty (None) values.
_FACTS = msgspec.json.Decoder(JobFields)
FACT_FIELDS = JOB_FIELDS - {"order_id"}


def connect(
    path: str,
    now: datetime,
    *,
    previous: PreviousMarks | None = None,
    run: str | None = None,
    boot: str | None = None,
) -> sqlite3.Connection:
    """Open the journal for this process; settle what the previous one left.

    ``previous``: the previous run's sent marks (:mod:`~shipping_async.bulk._sent_marks`),
    used only if the journal says that run was its last, on this boot (``boot``); then an
    intent without its mark goes back to ``quoted``. ``run`` and ``boot`` are recorded
    as this run's, for the marks file it starts.
    """
    if path != ":memory:":
        _create_private(path)
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
        ) from None
    except sqlite3.DatabaseError as exc:  # "file is not a database"
        db.close()
        raise JournalDataError(f"cannot open the journal {path}: {exc}") from None
    try:
        create(db)  # commits; the exclusive lock stays held
        db.execute("BEGIN IMMEDIATE")
        migrate(db)
        # One process at a time: whatever a previous process leased is abandoned.
        sent = _marks_of_last_run(db, previous, boot)
        expire_orders(db, now, everyone=True, sent=sent)
        _start_run(db, run, boot)
        db.execute(
            "UPDATE jobs SET lease_owner = NULL, lease_until = NULL, claim_token = NULL "
            "WHERE lease_owner IS NOT NULL OR lease_until IS NOT NULL OR claim_token IS NOT NULL"
        )
        db.execute("COMMIT")
    except (sqlite3.DatabaseError, JournalError) as exc:  # a table of another shape
        db.close()
        raise JournalDataError(f"cannot open the journal {path}: {exc}") from None
    return db


def _create_private(path: str) -> None:
    # The journal holds names, phones and addresses: a new file is readable by its owner
    # only. SQLite gives its -wal file the mode of the database file.
    try:
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as exc:
        raise JournalError(f"cannot create the journal {path}: {exc.strerror or exc}") from None


#: One queued write: what it does on the connection, the caller's future (``None`` for
#: the one whose caller is the committer), and whether it is atomic (makes no change when
#: it raises, so needs no savepoint of its own).
Write = tuple[Callable[[sqlite3.Connection], Any], "asyncio.Future[Any] | None", bool]


def run_batch(db: sqlite3.Connection, batch: Sequence[Write]) -> list[tuple[bool, Any]]:
    """Open a transaction and run every write of ``batch`` in it; each one's outcome
    (``(True, value)`` or ``(False, exception)``). One write's refusal undoes only its own
    changes; the caller commits (:func:`commit`)."""
    outcomes: list[tuple[bool, Any]] = []
    db.execute("BEGIN IMMEDIATE")
    try:
        for fn, _, atomic in batch:
            try:
                outcomes.append((True, fn(db) if atomic else in_savepoint(db, fn)))
            except Exception as exc:  # one caller's refusal must not undo the others
                outcomes.append((False, exc))
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return outcomes


def in_savepoint(db: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """``fn`` whose changes are undone if it raises (inside a transaction)."""
    db.execute("SAVEPOINT op")
    try:
        value = fn(db)
    except BaseException:
        db.execute("ROLLBACK TO op")
        db.execute("RELEASE op")
        raise
    db.execute("RELEASE op")
    return value


def commit(db: sqlite3.Connection) -> None:
    """Commit the open transaction (durably: ``synchronous=FULL``), or roll it back and
    raise what failed."""
    try:
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def commit_one(
    db: sqlite3.Connection, fn: Callable[[sqlite3.Connection], Any], riders: Sequence[Write] = ()
) -> list[tuple[bool, Any]]:
    """The atomic write ``fn`` committed now, with ``riders`` (writes queued meanwhile) in
    the same transaction: the outcomes of the riders, then ``fn``'s, once committed.
    Raises what the commit raised (then nothing was committed)."""
    outcomes = run_batch(db, [*riders, (fn, None, True)])
    commit(db)
    return outcomes


_MARKS_META = "sent_marks"


def _marks_of_last_run(
    db: sqlite3.Connection, previous: PreviousMarks | None, boot: str | None
) -> frozenset[tuple[str, str]] | None:
    """``previous``'s marks if they are the journal's last run's, on this boot."""
    if previous is None or boot is None or previous.boot != boot:
        return None
    row = db.execute("SELECT value FROM meta WHERE name = ?", [_MARKS_META]).fetchone()
    if row is None or row[0] != _run_stamp(previous.run, previous.boot):
        return None
    return previous.marks


def _start_run(db: sqlite3.Connection, run: str | None, boot: str | None) -> None:
    if run is None or boot is None:  # no marks file this time: none may match later
        db.execute("DELETE FROM meta WHERE name = ?", [_MARKS_META])
        return
    db.execute(
        "INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)",
        [_MARKS_META, _run_stamp(run, boot)],
    )


def _run_stamp(run: str, boot: str) -> str:
    return f"{run} {boot}"


def expire_orders(
    db: sqlite3.Connection,
    now: datetime,
    *,
    everyone: bool = False,
    exclude: Collection[str] = (),
    sent: frozenset[tuple[str, str]] | None = None,
) -> list[str]:
    """ORDERING jobs whose worker is gone (lease over) cannot know their answer: UNKNOWN.

    Jobs in ``exclude`` are the caller's own, still being worked on: not gone. With
    ``sent`` (the dead run's sent marks, see :mod:`~shipping_async.bulk._sent_marks`), a
    job whose intent has no mark was never sent: it goes back to QUOTED instead. Returns
    the keys of the jobs moved (their leases are gone).
    """
    moved: list[str] = []
    sql = f"SELECT {COLUMNS} FROM {JOBS} WHERE state = ?"
    params: list[Any] = [JobState.ORDERING.value]
    if not everyone:
        sql += " AND (lease_until IS NULL OR lease_until <= ?)"
        params.append(now.timestamp())
    for row in db.execute(sql, params).fetchall():
        if row[0] in exclude:
            continue
        record = to_record(row)
        intent = record.order_intent_at
        moved.append(record.key)
        if sent is not None and intent is not None and (record.key, wall_stamp(intent)) not in sent:
            store_state(db, record, JobState.QUOTED, {}, now.isoformat(), lease=NO_LEASE)
            continue
        fields: JobFields = {"error": DIED_MID_ORDER, "error_stage": "order", "retryable": False}
        store_state(db, record, JobState.UNKNOWN, fields, now.isoformat(), lease=NO_LEASE)
    return moved


#: A lease as stored: (owner, until as a timestamp, claim token).
Lease = tuple[str | None, float | None, str | None]
NO_LEASE: Lease = (None, None, None)


def claim_row(
    db: sqlite3.Connection, record: JobRecord, worker_id: str, now: datetime, lease: float
) -> JobRecord:
    fields = NO_ERROR if record.state is JobState.FAILED else {}
    return store_state(
        db,
        record,
        record.next_stage,
        fields,
        now.isoformat(),
        lease=(worker_id, now.timestamp() + lease, new_token()),
        claimed=True,
    )


def store_state(
    db: sqlite3.Connection,
    record: JobRecord,
    state: JobState,
    fields: JobFields,
    stamp: str,
    *,
    lease: Lease,
    claimed: bool = False,
    intent_stamp: str | None = None,
) -> JobRecord:
    """Write ``record`` in ``state`` with ``fields`` added (one attempt more if ``claimed``);
    into ``ORDERING`` stamped ``intent_stamp`` (:func:`wall_stamp`, now if not given)."""
    facts: dict[str, Any] = {name: getattr(record, name) for name in FACT_FIELDS}
    facts.update(fields)
    order_id = facts.pop("order_id", record.order_id)
    intent = (intent_stamp or wall_stamp()) if state is JobState.ORDERING else None
    cursor = db.execute(
        "UPDATE jobs SET state = ?, facts = ?, order_id = ?, retryable = ?, lease_owner = ?, "
        "lease_until = ?, claim_token = ?, order_intent_at = COALESCE(?, order_intent_at), "
        "updated_at = ?, attempts = attempts + ? WHERE key = ? "
        f"RETURNING {RETURNED}",
        [
            state.value,
            JOB_ENCODER.encode({name: value for name, value in facts.items() if value is not None}),
            order_id,
            int(facts["retryable"]),
            *lease,
            intent,
            stamp,
            int(claimed),
            record.key,
        ],
    )
    # The job column never changes once added: the row's job is ``record.job``, read in
    # this same transaction, not a second decode of the same bytes.
    return to_record(cursor.fetchone(), job=record.job)


def wall_stamp(at: datetime | None = None) -> str:
    """Real wall-clock time (not a sandbox's scaled clock), fixed width so that stamps
    compare as text: order intents are compared across processes and restarts."""
    return (at or datetime.now(UTC)).isoformat(timespec="microseconds")


def intent_ages(db: sqlite3.Connection, within: float, account: str | None) -> list[float]:
    """Real seconds since each order intent of the last ``within`` seconds, on this host's
    wall clock (a stamp in its future counts as just now)."""
    now = datetime.now(UTC)
    sql = "SELECT order_intent_at FROM jobs WHERE order_intent_at >= ?"
    params: list[Any] = [wall_stamp(now - timedelta(seconds=within))]
    if account is not None:
        sql += " AND account = ?"
        params.append(account)
    return [
        max(0.0, (now - datetime.fromisoformat(stamp)).total_seconds())
        for (stamp,) in db.execute(sql, params)
    ]


def to_record(row: tuple[Any, ...], *, job: ShipmentJob | None = None) -> JobRecord:
    """The record of a row; ``job``: the row's job, already decoded (its column never
    changes once added, and decoding it is most of the cost of a row)."""
    key, account, state, raw_job, facts, order_id, attempts, owner, until, intent = row[:10]
    updated, token = row[10:]
    fields = read_column(key, "facts", _FACTS.decode, facts)
    if order_id is not None:
        fields["order_id"] = read_column(key, "order_id", _order_id, order_id)
    return JobRecord(
        key=key,
        job=job if job is not None else read_column(key, "job", JOB_DECODER.decode, raw_job),
        state=read_column(key, "state", JobState, state),
        account=account,
        attempts=attempts,
        lease_owner=owner,
        claim_token=token,
        lease_until=datetime.fromtimestamp(until, UTC) if until is not None else None,
        order_intent_at=datetime.fromisoformat(intent) if intent else None,
        updated_at=datetime.fromisoformat(updated),
        **fields,
    )


def _order_id(value: object) -> int:
    if type(value) is not int:
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return value


def select_keys(
    db: sqlite3.Connection,
    keys: Sequence[str],
    known: Mapping[str, tuple[bytes, ShipmentJob]] | None = None,
) -> list[JobRecord]:
    """The records of ``keys``. ``known``: key -> (encoded job, job) the caller holds; a
    row whose job column is those very bytes takes that job instead of decoding it."""
    records: list[JobRecord] = []
    for chunk in key_chunks(keys):
        sql = f"SELECT {COLUMNS} FROM {JOBS} WHERE key IN ({placeholders(chunk)}) ORDER BY j.seq"
        for row in db.execute(sql, chunk):
            mine = known.get(row[0]) if known is not None else None
            job = mine[1] if mine is not None and mine[0] == row[3] else None
            records.append(to_record(row, job=job))
    return records


def held_keys(db: sqlite3.Connection, claims: Sequence[tuple[str, str]]) -> set[str]:
    """The keys of ``claims`` (key, claim token) whose token is still the job's."""
    tokens = dict(claims)
    held: set[str] = set()
    for chunk in key_chunks(list(tokens)):
        sql = f"SELECT key, claim_token FROM jobs WHERE key IN ({placeholders(chunk)})"
        held.update(key for key, token in db.execute(sql, chunk) if token == tokens[key])
    return held


def select_one(
    db: sqlite3.Connection, key: str, known: Mapping[str, tuple[bytes, ShipmentJob]] | None = None
) -> JobRecord:
    rows = select_keys(db, [key], known)
    if not rows:
        raise no_such_job(key)
    return rows[0]


def read_page(
    db: sqlite3.Connection, *, after: int, states: list[str] | None
) -> list[tuple[int, JobRecord]]:
    sql = f"SELECT j.seq, {COLUMNS} FROM {JOBS} WHERE j.seq > ?"
    params: list[Any] = [after]
    if states is not None:
        sql += f" AND state IN ({placeholders(states)})"
        params.extend(states)
    rows = db.execute(sql + " ORDER BY j.seq LIMIT ?", [*params, CHUNK]).fetchall()
    return [(row[0], to_record(row[1:])) for row in rows]


def key_chunks(keys: Sequence[str]) -> list[Sequence[str]]:
    return [keys[start : start + CHUNK] for start in range(0, len(keys), CHUNK)]


def placeholders(values: Sequence[Any]) -> str:
    return ", ".join("?" * len(values))
