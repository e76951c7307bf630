"""The SQLite journal: intent before send, resume semantics, unknown outcomes, leases."""

from __future__ import annotations

import asyncio
import sqlite3
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import pytest

from shipping_async.bulk.journal import (
    JobFields,
    JobState,
    Journal,
    JournalError,
    JournalStateError,
    LeaseLostError,
)
from shipping_async.bulk.sqlite_journal import SQLiteJournal
from shipping_async.clock import ManualClock
from tests.bulk.support import make_job, make_jobs

W = "worker-1"


async def claim(journal: SQLiteJournal, worker: str = W, **options: Any) -> dict[str, str]:
    """Claim (60 s leases, up to 10 jobs unless told); each claimed key's claim token."""
    options = {"lease": 60, "limit": 10, **options}
    return {r.key: r.claim_token for r in await journal.claim(worker, **options) if r.claim_token}


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "batch.journal"


async def test_sqlite_journal_implements_the_protocol(path: Path) -> None:
    async with await SQLiteJournal.open(path) as journal:
        assert isinstance(journal, Journal)


async def test_add_is_idempotent_by_key_and_returns_the_stored_state(path: Path) -> None:
    async with await SQLiteJournal.open(path) as journal:
        await journal.add(make_jobs(3))
        t = await claim(journal, limit=1)
        await journal.record(t["PO-0000"], "PO-0000", JobState.QUOTED, quote_id=7, estimate_id=8)
        again = await journal.add(make_jobs(4))
        assert [record.state for record in again] == [
            JobState.QUOTED,
            JobState.PENDING,
            JobState.PENDING,
            JobState.PENDING,
        ]
        assert sum((await journal.counts()).values()) == 4


async def test_order_intent_is_durable_and_a_crash_after_it_leaves_the_job_unknown(
    path: Path,
) -> None:
    journal = await SQLiteJournal.open(path)
    await journal.add([make_job("A")])
    t = (await claim(journal))["A"]
    await journal.record(t, "A", JobState.QUOTED, quote_id=1, estimate_id=2)
    intent = await journal.begin_order(t, "A", quote_id=1, estimate_id=2)
    assert intent.state is JobState.ORDERING
    assert intent.order_intent_at is not None
    journal.sending("A")  # its request's first byte goes next
    await journal.close()  # the process "dies" here: no answer was recorded

    async with await SQLiteJournal.open(path) as reopened:
        unknown = await reopened.needs_reconciliation()
        assert [record.key for record in unknown] == ["A"]
        assert unknown[0].error is not None
        assert "reconcile" in unknown[0].error
        # Never handed out again: an unknown order is not re-sent.
        assert await reopened.claim("worker-2", lease=60, limit=10) == []


async def test_order_intents_of_the_last_window_are_listed_with_their_age(path: Path) -> None:
    async with await SQLiteJournal.open(path) as journal:
        await journal.add([make_job("A"), make_job("B"), make_job("C")])
        t = await claim(journal, limit=3)
        for key in ("A", "B"):
            await journal.record(t[key], key, JobState.QUOTED, quote_id=1, estimate_id=2)
            await journal.begin_order(t[key], key, quote_id=1, estimate_id=2)
        await journal.record(t["A"], "A", JobState.ORDERED, order_id=9)  # answered: counts

    # Ages are real seconds on this host's wall clock, whatever clock the run used.
    async with await SQLiteJournal.open(path) as reopened:
        ages = await reopened.order_intent_ages(within=60)
        assert len(ages) == 2
        assert all(0 <= age < 5 for age in ages)
        await asyncio.sleep(0.05)
        assert await reopened.order_intent_ages(within=0.01) == []
        assert len(await reopened.order_intent_ages(within=60, account="")) == 2
        assert await reopened.order_intent_ages(within=60, account="other") == []


async def test_begin_order_twice_is_refused(path: Path) -> None:
    async with await SQLiteJournal.open(path) as journal:
        await journal.add([make_job("A")])
        t = (await claim(journal))["A"]
        await journal.record(t, "A", JobState.QUOTED, quote_id=1, estimate_id=2)
        await journal.begin_order(t, "A", quote_id=1, estimate_id=2)
        with pytest.raises(JournalStateError):
            await journal.begin_order(t, "A", quote_id=1, estimate_id=2)


async def test_begin_order_from_pending_records_the_quote_with_the_intent(path: Path) -> None:
    # A job whose order follows its quote at once: one write for both (none for QUOTED).
    async with await SQLiteJournal.open(path) as journal:
        await journal.add([make_job("A")])
        t = (await claim(journal))["A"]
        quote: JobFields = {"carrier": "Sandbox Freight", "cost": Decimal("12.50"), "hub": True}
        intent = await journal.begin_order(t, "A", quote_id=7, estimate_id=70, quote=quote)
        facts = (intent.state, intent.quote_id, intent.estimate_id, intent.cost, intent.hub)
        assert facts == (JobState.ORDERING, 7, 70, Decimal("12.50"), True)
        assert await journal.get("A") == intent
        withdrawn = await journal.withdraw_order(t, "A")  # a 429: the quote stays recorded
        assert (withdrawn.state, withdrawn.carrier) == (JobState.QUOTED, "Sandbox Freight")
        assert await journal.get("A") == withdrawn
        await journal.record(t, "A", JobState.ORDERED, order_id=1)
        with pytest.raises(JournalStateError, match="ordering needs pending or quoted"):
            await journal.begin_order(t, "A", quote_id=7, estimate_id=70)


async def test_a_withdrawn_intent_leaves_the_job_quoted_and_a_restart_resumes_it(
    path: Path,
) -> None:
    journal = await SQLiteJournal.open(path)
    await journal.add([make_job("A")])
    t = (await claim(journal))["A"]
    await journal.record(t, "A", JobState.QUOTED, quote_id=1, estimate_id=2)
    await journal.begin_order(t, "A", quote_id=1, estimate_id=2)
    withdrawn = await journal.withdraw_order(t, "A")
    assert withdrawn.state is JobState.QUOTED
    with pytest.raises(JournalStateError):
        await journal.withdraw_order(t, "A")
    await journal.close()  # the process dies while the job waits for its next permit
    async with await SQLiteJournal.open(path) as reopened:
        assert await reopened.needs_reconciliation() == []
        [again] = await reopened.claim("w2", lease=60, limit=1)
        assert (again.state, again.quote_id) == (JobState.QUOTED, 1)


async def test_resume_skips_finished_jobs_and_continues_ordered_ones(path: Path) -> None:
    journal = await SQLiteJournal.open(path)
    await journal.add(make_jobs(3))
    t = await claim(journal, limit=3)
    await journal.finish(t["PO-0000"], "PO-0000", JobState.DONE, pickup_confirmation="PU1")
    await journal.record(t["PO-0001"], "PO-0001", JobState.QUOTED, quote_id=1, estimate_id=2)
    await journal.begin_order(t["PO-0001"], "PO-0001", quote_id=1, estimate_id=2)
    await journal.record(t["PO-0001"], "PO-0001", JobState.ORDERED, order_id=99)
    await journal.close()

    async with await SQLiteJournal.open(path) as journal:
        claimed = {record.key: record for record in await journal.claim("w2", lease=60, limit=9)}
        assert set(claimed) == {"PO-0001", "PO-0002"}
        assert claimed["PO-0001"].state is JobState.ORDERED
        assert claimed["PO-0001"].order_id == 99
        assert claimed["PO-0002"].state is JobState.PENDING


async def test_retrying_a_failed_job_continues_after_its_last_success(path: Path) -> None:
    async with await SQLiteJournal.open(path) as journal:
        await journal.add([make_job("A"), make_job("B")])
        t = await claim(journal, limit=2)
        await journal.record(t["A"], "A", JobState.QUOTED, quote_id=1, estimate_id=2)
        await journal.begin_order(t["A"], "A", quote_id=1, estimate_id=2)
        await journal.record(t["A"], "A", JobState.ORDERED, order_id=5)
        await journal.finish(
            t["A"], "A", JobState.FAILED, error="503", error_stage="waybill", retryable=True
        )
        await journal.finish(t["B"], "B", JobState.FAILED, error="400", error_stage="quote")
        assert await journal.claim("w2", lease=60, limit=9) == []
        retried = await journal.claim("w2", lease=60, limit=9, retry_failed=True)
        assert [(r.key, r.state, r.order_id, r.error) for r in retried] == [
            ("A", JobState.ORDERED, 5, None)
        ]


async def test_each_claim_counts_one_attempt_and_a_release_keeps_the_count(path: Path) -> None:
    async with await SQLiteJournal.open(path) as journal:
        await journal.add([make_job("A")])
        [first] = await journal.claim(W, lease=60, limit=1)
        assert first.claim_token is not None
        await journal.release({"A": first.claim_token})
        [second] = await journal.claim("w2", lease=60, limit=1)
        stored = await journal.get("A")
        assert (first.attempts, second.attempts) == (1, 2)
        assert stored is not None
        assert stored.attempts == 2


async def test_reconcile_settles_an_unknown_job_either_way(path: Path) -> None:
    journal = await SQLiteJournal.open(path)
    await journal.add([make_job("A"), make_job("B")])
    t = await claim(journal, limit=2)
    for key in ("A", "B"):
        await journal.record(t[key], key, JobState.QUOTED, quote_id=1, estimate_id=2)
        await journal.begin_order(t[key], key, quote_id=1, estimate_id=2)
        journal.sending(key)
    await journal.close()
    async with await SQLiteJournal.open(path) as journal:
        found = await journal.reconcile("A", order_id=42)
        absent = await journal.reconcile("B", order_id=None)
        assert (found.state, found.order_id) == (JobState.ORDERED, 42)
        assert absent.state is JobState.PENDING
        assert await journal.needs_reconciliation() == []
        with pytest.raises(JournalStateError):
            await journal.reconcile("A", order_id=42)


async def test_a_worker_without_the_lease_cannot_write(path: Path) -> None:
    async with await SQLiteJournal.open(path) as journal:
        await journal.add([make_job("A")])
        t = await claim(journal, limit=1)
        with pytest.raises(LeaseLostError):
            await journal.record("not-the-token", "A", JobState.QUOTED, quote_id=1)
        assert await journal.claim("intruder", lease=60, limit=1) == []
        await journal.release(t)
        assert [r.key for r in await journal.claim("intruder", lease=60, limit=1)] == ["A"]


async def test_a_lapsed_lease_nobody_claimed_is_taken_back_by_renewal(path: Path) -> None:
    clock = ManualClock()
    async with await SQLiteJournal.open(path, clock=clock) as journal:
        await journal.add([make_job("A")])
        t = await claim(journal, lease=10)
        clock.advance(11)
        assert await journal.renew(t, lease=10) == {"A"}  # nobody else holds it
        assert await journal.claim("other", lease=10, limit=1) == []
        clock.advance(11)
        [taken] = await journal.claim("other", lease=10, limit=1)
        assert await journal.renew(t, lease=10) == set()  # claimed since: not ours
        assert taken.claim_token is not None
        assert await journal.renew({"A": taken.claim_token}, lease=10) == {"A"}


async def test_a_claim_leaves_out_the_jobs_the_caller_still_works_on(path: Path) -> None:
    clock = ManualClock()
    async with await SQLiteJournal.open(path, clock=clock) as journal:
        await journal.add(make_jobs(3))
        await claim(journal, lease=10, limit=1)
        clock.advance(11)  # PO-0000's lease lapsed, but its task is still working
        again = await journal.claim(W, lease=10, limit=3, exclude=["PO-0000"])
        assert [record.key for record in again] == ["PO-0001", "PO-0002"]


async def test_a_journal_file_from_before_claim_tokens_opens_and_works(path: Path) -> None:
    old = sqlite3.connect(path)
    old.executescript(OLD_SCHEMA)
    job = msgspec.json.encode(make_job("A"))
    old.execute(
        "INSERT INTO jobs (key, state, job, facts, updated_at) VALUES ('A', 'pending', ?, "
        "'{}', '2026-01-05T09:00:00+00:00')",
        [job],
    )
    old.commit()
    old.close()
    async with await SQLiteJournal.open(path) as journal:
        [record] = await journal.claim(W, lease=60, limit=1)
        assert record.claim_token is not None
        quoted = await journal.record(record.claim_token, "A", JobState.QUOTED, quote_id=3)
        assert quoted.quote_id == 3


# The schema of journal files written before claim tokens existed.
OLD_SCHEMA = """
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
    updated_at TEXT NOT NULL
);
CREATE INDEX jobs_by_state ON jobs (state, account);
"""


async def test_one_refused_write_does_not_undo_the_others_in_its_commit(path: Path) -> None:
    async with await SQLiteJournal.open(path) as journal:
        await journal.add(make_jobs(5))
        t = await claim(journal, limit=5)
        writes = [
            journal.record(t[f"PO-{i:04d}"], f"PO-{i:04d}", JobState.QUOTED, cost=Decimal(i))
            for i in range(5)
        ]
        writes.append(journal.record("intruder", "PO-0001", JobState.QUOTED))
        outcomes = await asyncio.gather(*writes, return_exceptions=True)
        assert isinstance(outcomes[-1], LeaseLostError)
        costs = [(await journal.get(f"PO-{i:04d}")) for i in range(5)]
        assert [record.cost for record in costs if record] == [Decimal(i) for i in range(5)]


async def test_a_second_process_cannot_open_a_journal_in_use(path: Path) -> None:
    async with await SQLiteJournal.open(path):
        with pytest.raises(JournalError, match="another run"):
            await SQLiteJournal.open(path)


async def test_records_stream_in_the_order_jobs_were_added(path: Path) -> None:
    async with await SQLiteJournal.open(path) as journal:
        await journal.add(make_jobs(1200))
        keys = [record.key async for record in journal.records()]
        assert keys == [f"PO-{i:04d}" for i in range(1200)]


async def test_a_claim_reads_the_job_as_stored_even_when_its_bytes_changed_since_added(
    path: Path,
) -> None:
    # The journal keeps the jobs it added decoded; a row whose job column was rewritten
    # since must be claimed as it now is, never from what was kept. (Under a claim the
    # journal writes from the claimed record: the file is this process's alone, and no
    # write of this journal changes a job once added.)
    async with await SQLiteJournal.open(path) as journal:
        added = await journal.add(make_jobs(2))
        changed = msgspec.structs.replace(added[0].job, account="elsewhere")
        journal._db.execute(
            "UPDATE job_inputs SET job = ? WHERE seq = (SELECT seq FROM jobs WHERE key = ?)",
            [msgspec.json.encode(changed), "PO-0000"],
        )
        claimed = {record.key: record for record in await journal.claim(W, lease=60, limit=2)}
        token = claimed["PO-0000"].claim_token
        assert token is not None
        quoted = await journal.record(token, "PO-0000", JobState.QUOTED, quote_id=9, estimate_id=10)
        stored = await journal.get("PO-0000")
    assert added[0].job.account == ""
    assert claimed["PO-0000"].job == changed
    assert quoted.job == changed
    assert stored is not None
    assert stored.job == changed
    assert claimed["PO-0001"].job == added[1].job
