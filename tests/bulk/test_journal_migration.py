"""Journal files written by the previous version (each job's input in its row, the order
id inside the facts) open, migrate in place, and resume where they stood."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import msgspec
import pytest

from shipping_async.bulk.journal import JobState, JournalDataError
from shipping_async.bulk.sqlite_journal import SQLiteJournal
from tests.bulk.support import make_job

W = "worker-1"

# The schema of journal files before the job's input moved to a table of its own.
PREVIOUS_SCHEMA = """
CREATE TABLE jobs (
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
    updated_at TEXT NOT NULL,
    claim_token TEXT
);
CREATE INDEX jobs_by_state ON jobs (state, account);
CREATE INDEX jobs_by_order ON jobs (json_extract(facts, '$.order_id'));
CREATE TABLE order_events (
    order_id INTEGER PRIMARY KEY,
    received_at TEXT NOT NULL,
    deliveries INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX order_events_by_time ON order_events (received_at);
CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
STAMP = "2026-01-05T09:00:00+00:00"
INTENT = "2026-01-05T09:00:01.000000+00:00"
# (key, state, facts, order intent, lease owner, claim token) as the previous version wrote
ROWS = [
    ("A", "pending", b"{}", None, None, None),
    (
        "B",
        "quoted",
        b'{"quote_id":7,"estimate_id":70,"cost":"12.50","currency":"USD"}',
        None,
        "w",
        "t",
    ),
    ("C", "ordered", b'{"quote_id":8,"estimate_id":80,"order_id":501}', INTENT, "w", "t2"),
    (
        "D",
        "done",
        b'{"order_id":502,"waybills":["WB1"],"pickup_confirmation":"PU1"}',
        INTENT,
        None,
        None,
    ),
    (
        "E",
        "failed",
        b'{"order_id":503,"error":"x","error_stage":"waybill","retryable":true}',
        INTENT,
        None,
        None,
    ),
    ("F", "ordering", b'{"quote_id":9,"estimate_id":90}', INTENT, "w", "t3"),
]


def _previous_file(
    path: Path, rows: list[tuple[object, ...]] = ROWS, *, sequence: int = 0, damaged: bool = False
) -> None:
    old = sqlite3.connect(path)
    schema = PREVIOUS_SCHEMA
    if damaged:  # written by another program: its index could not have taken these facts
        schema = schema.replace("CREATE INDEX jobs_by_order", "-- ")
    old.executescript(schema)
    for key, state, facts, intent, owner, token in rows:
        retryable = int(b'"retryable":true' in facts)  # type: ignore[operator]
        old.execute(
            "INSERT INTO jobs (key, state, job, facts, retryable, lease_owner, lease_until, "
            "order_intent_at, updated_at, claim_token) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                key,
                state,
                msgspec.json.encode(make_job(str(key))),
                facts,
                retryable,
                owner,
                None if owner is None else 2e9,
                intent,
                STAMP,
                token,
            ],
        )
    if sequence:  # jobs were deleted by hand: their seqs are never given again
        old.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = 'jobs'", [sequence])
    old.execute("INSERT INTO order_events (order_id, received_at) VALUES (502, ?)", [INTENT])
    old.commit()
    old.close()


async def test_a_journal_file_of_the_previous_version_opens_and_keeps_every_fact(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.journal"
    _previous_file(path)

    async with await SQLiteJournal.open(path) as journal:
        records = {record.key: record async for record in journal.records()}
        assert list(records) == ["A", "B", "C", "D", "E", "F"]  # in the order added
        assert {key: record.job for key, record in records.items()} == {
            key: make_job(key) for key in records
        }
        b, c, d, e, f = (records[key] for key in "BCDEF")
        assert (b.state, b.quote_id, b.cost, b.currency) == (
            JobState.QUOTED,
            7,
            Decimal("12.50"),
            "USD",
        )
        assert (c.state, c.order_id, c.estimate_id) == (JobState.ORDERED, 501, 80)
        assert (d.state, d.order_id, d.waybills, d.pickup_confirmation) == (
            JobState.DONE,
            502,
            ["WB1"],
            "PU1",
        )
        assert (e.state, e.order_id, e.retryable) == (JobState.FAILED, 503, True)
        # Settled as any reopened journal: the dead run's intent is unknown, leases gone.
        assert f.state is JobState.UNKNOWN
        assert f.order_intent_at == datetime.fromisoformat(INTENT)
        assert all(record.claim_token is None for record in records.values())
        # The order-id index answers the evidence's owner lookup.
        [evidence] = await journal.order_received(since=datetime(2026, 1, 1, tzinfo=UTC))
        assert (evidence.order_id, evidence.owner) == (502, "D")


async def test_a_migrated_journal_resumes_and_adds_after_its_last_job(tmp_path: Path) -> None:
    path = tmp_path / "old.journal"
    _previous_file(path, sequence=10)  # the previous run had deleted jobs 7 to 10

    async with await SQLiteJournal.open(path) as journal:
        await journal.add([make_job("G")])
        claimed = await journal.claim(W, lease=60, limit=10, retry_failed=True)
        assert [record.key for record in claimed] == ["A", "B", "C", "E", "G"]
        tokens = {record.key: record.claim_token or "" for record in claimed}
        ordered = await journal.record(tokens["A"], "A", JobState.ORDERED, order_id=601)
        waybilled = await journal.record(tokens["E"], "E", JobState.WAYBILLED, waybills=["W"])
        assert (ordered.order_id, waybilled.order_id) == (601, 503)
        assert await journal.get("A") == ordered
        assert await journal.get("E") == waybilled
        seqs = dict(journal._db.execute("SELECT key, seq FROM jobs").fetchall())
    assert seqs["G"] == 11
    # Opened again (no migration left to do), everything reads as written.
    async with await SQLiteJournal.open(path) as journal:
        again = await journal.get("E")
        assert again is not None
        assert (again.state, again.order_id, again.waybills) == (
            JobState.WAYBILLED,
            503,
            ["W"],
        )


async def test_a_damaged_row_of_a_previous_file_is_named_when_read_not_at_opening(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.journal"
    rows = [
        *ROWS[:2],
        ("X", "ordered", b'{"order_id":"501"', None, None, None),  # not JSON
        ("Y", "ordered", b'{"order_id":"501"}', None, None, None),  # not an integer
    ]
    _previous_file(path, rows, damaged=True)

    async with await SQLiteJournal.open(path) as journal:
        assert (await journal.get("B") or ROWS).quote_id == 7  # type: ignore[union-attr]
        with pytest.raises(JournalDataError, match="'X': column facts"):
            await journal.get("X")
        with pytest.raises(JournalDataError, match="'Y': column facts"):
            await journal.get("Y")
