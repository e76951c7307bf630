"""The SQLite journal's tables, and the migration of files written by older versions.

A job's state changes several times and its input never does, so they live apart: each
write rewrites a small ``jobs`` row (about 200 bytes: a page holds a dozen), not the job's
1-2 KB of JSON (``job_inputs``, written once, when the job is added). The writes of a
group commit then land on a few pages of the write-ahead log instead of one page per job.
The order id is a column of its own, indexed only where it is set: its index changes
once per job (when the order is recorded), not at every write as an index on an
expression over the facts did.
"""

from __future__ import annotations

import sqlite3

__all__ = ["COLUMNS", "JOBS", "RETURNED", "create", "migrate"]

_JOBS_TABLE = """
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    account TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL,
    facts BLOB NOT NULL,
    order_id INTEGER,
    retryable INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT,
    lease_until REAL,
    order_intent_at TEXT,
    updated_at TEXT NOT NULL,
    claim_token TEXT
)
"""
_TABLES = f"""
{_JOBS_TABLE};
CREATE TABLE IF NOT EXISTS job_inputs (
    seq INTEGER PRIMARY KEY,
    job BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS order_events (
    order_id INTEGER PRIMARY KEY,
    received_at TEXT NOT NULL,
    deliveries INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS meta (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""
_INDEXES = (
    "CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state, account)",
    "CREATE INDEX IF NOT EXISTS jobs_by_order_id ON jobs (order_id) WHERE order_id IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS order_events_by_time ON order_events (received_at)",
)

#: A job's row and its input (``JOBS``), in the order :func:`.to_record` reads them.
COLUMNS = (
    "j.key, j.account, j.state, i.job, j.facts, j.order_id, j.attempts, j.lease_owner, "
    "j.lease_until, j.order_intent_at, j.updated_at, j.claim_token"
)
JOBS = "jobs j JOIN job_inputs i ON i.seq = j.seq"
#: The same from an ``UPDATE jobs ... RETURNING`` (the input, never changed, is not read).
RETURNED = (
    "key, account, state, NULL, facts, order_id, attempts, lease_owner, lease_until, "
    "order_intent_at, updated_at, claim_token"
)


def create(db: sqlite3.Connection) -> None:
    """The tables (``executescript``: commits what is open); the indexes come with
    :func:`migrate`, once the tables have this version's shape."""
    db.executescript(_TABLES)


def migrate(db: sqlite3.Connection) -> None:
    """Bring a journal file written by an older version up to this schema, in place (in
    the caller's transaction), and make sure every index exists."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
    if "job" in columns:  # journals before the job's input had a table of its own
        _move_inputs_out(db, claim_tokens="claim_token" in columns)
    for index in _INDEXES:
        db.execute(index)


#: Facts that hold an integer order id. Damaged facts (not JSON, an id of another type)
#: are moved as they are: reading that job then says what is wrong with it. (Nested: the
#: JSON functions raise on text that is not JSON.)
_HAS_ORDER_ID = "CASE WHEN json_valid(facts) THEN json_type(facts, '$.order_id') = 'integer' END"


def _move_inputs_out(db: sqlite3.Connection, *, claim_tokens: bool) -> None:
    """The jobs table of an older file rebuilt in this shape: its inputs to
    ``job_inputs``, the order id out of the facts into its column (also for files from
    before claim tokens, whose jobs have none). The sequence of ``seq`` goes on."""
    db.execute("INSERT INTO job_inputs (seq, job) SELECT seq, job FROM jobs")
    db.execute("ALTER TABLE jobs RENAME TO jobs_before")
    db.execute(_JOBS_TABLE)
    token = "claim_token" if claim_tokens else "NULL"
    db.execute(
        "INSERT INTO jobs (seq, key, account, state, facts, order_id, retryable, attempts, "
        "lease_owner, lease_until, order_intent_at, updated_at, claim_token) "
        f"SELECT seq, key, account, state, CASE WHEN {_HAS_ORDER_ID} THEN "
        "json_remove(facts, '$.order_id') ELSE facts END, CASE WHEN "
        f"{_HAS_ORDER_ID} THEN json_extract(facts, '$.order_id') END, retryable, attempts, "
        f"lease_owner, lease_until, order_intent_at, updated_at, {token} "
        "FROM jobs_before ORDER BY seq"
    )
    db.execute("DELETE FROM sqlite_sequence WHERE name = 'jobs'")
    db.execute("UPDATE sqlite_sequence SET name = 'jobs' WHERE name = 'jobs_before'")
    db.execute("DROP TABLE jobs_before")
