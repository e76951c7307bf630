"""The SQLite journal: intent before send, resume semantics, unknown outcomes, leases."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path

import pytest

from shipping_async.bulk.journal import (
    JobState,
    Journal,
    JournalError,
    JournalStateError,
    LeaseLostError,
)
from shipping_async.bulk.sqlite_journal import SQLiteJournal
from tests.bulk.support import make_job, make_jobs

W = "worker-1"


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "batch.journal"


async def test_sqlite_journal_implements_the_protocol(path: Path) -> None:
    async with await SQLiteJournal.open(path) as journal:
        assert isinstance(journal, Journal)


async def test_add_is_idempotent_by_key_and_returns_the_stored_state(path: Path) -> None:
    async with await SQLiteJournal.open(path) as journal:
        await journal.add(make_jobs(3))
        await journal.claim(W, lease=60, limit=1)
        await journal.record(W, "PO-0000", JobState.QUOTED, quote_id=7, estimate_id=8)
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
    await journal.claim(W, lease=60, limit=1)
    await journal.record(W, "A", JobState.QUOTED, quote_id=1, estimate_id=2)
    intent = await journal.begin_order(W, "A", quote_id=1, estimate_id=2)
    assert intent.state is JobState.ORDERING
    assert intent.order_intent_at is not None
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
        await journal.claim(W, lease=60, limit=3)
        for key in ("A", "B"):
            await journal.record(W, key, JobState.QUOTED, quote_id=1, estimate_id=2)
            await journal.begin_order(W, key, quote_id=1, estimate_id=2)
        await journal.record(W, "A", JobState.ORDERED, order_id=9)  # answered: still counts

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
        await journal.claim(W, lease=60, limit=1)
        await journal.record(W, "A", JobState.QUOTED, quote_id=1, estimate_id=2)
        await journal.begin_order(W, "A", quote_id=1, estimate_id=2)
        with pytest.raises(JournalStateError):
            await journal.begin_order(W, "A", quote_id=1, estimate_id=2)


async def test_resume_skips_finished_jobs_and_continues_ordered_ones(path: Path) -> None:
    journal = await SQLiteJournal.open(path)
    await journal.add(make_jobs(3))
    await journal.claim(W, lease=60, limit=3)
    await journal.finish(W, "PO-0000", JobState.DONE, pickup_confirmation="PU1")
    await journal.record(W, "PO-0001", JobState.QUOTED, quote_id=1, estimate_id=2)
    await journal.begin_order(W, "PO-0001", quote_id=1, estimate_id=2)
    await journal.record(W, "PO-0001", JobState.ORDERED, order_id=99)
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
        await journal.claim(W, lease=60, limit=2)
        await journal.record(W, "A", JobState.QUOTED, quote_id=1, estimate_id=2)
        await journal.begin_order(W, "A", quote_id=1, estimate_id=2)
        await journal.record(W, "A", JobState.ORDERED, order_id=5)
        await journal.finish(
            W, "A", JobState.FAILED, error="503", error_stage="waybill", retryable=True
        )
        await journal.finish(W, "B", JobState.FAILED, error="400", error_stage="quote")
        assert await journal.claim("w2", lease=60, limit=9) == []
        retried = await journal.claim("w2", lease=60, limit=9, retry_failed=True)
        assert [(r.key, r.state, r.order_id, r.error) for r in retried] == [
            ("A", JobState.ORDERED, 5, None)
        ]


async def test_each_claim_counts_one_attempt_and_a_release_keeps_the_count(path: Path) -> None:
    async with await SQLiteJournal.open(path) as journal:
        await journal.add([make_job("A")])
        [first] = await journal.claim(W, lease=60, limit=1)
        await journal.release(W, ["A"])
        [second] = await journal.claim("w2", lease=60, limit=1)
        stored = await journal.get("A")
        assert (first.attempts, second.attempts) == (1, 2)
        assert stored is not None
        assert stored.attempts == 2


async def test_reconcile_settles_an_unknown_job_either_way(path: Path) -> None:
    journal = await SQLiteJournal.open(path)
    await journal.add([make_job("A"), make_job("B")])
    await journal.claim(W, lease=60, limit=2)
    for key in ("A", "B"):
        await journal.record(W, key, JobState.QUOTED, quote_id=1, estimate_id=2)
        await journal.begin_order(W, key, quote_id=1, estimate_id=2)
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
        await journal.claim(W, lease=60, limit=1)
        with pytest.raises(LeaseLostError):
            await journal.record("intruder", "A", JobState.QUOTED, quote_id=1)
        assert await journal.claim("intruder", lease=60, limit=1) == []
        await journal.release(W, ["A"])
        assert [r.key for r in await journal.claim("intruder", lease=60, limit=1)] == ["A"]


async def test_one_refused_write_does_not_undo_the_others_in_its_commit(path: Path) -> None:
    async with await SQLiteJournal.open(path) as journal:
        await journal.add(make_jobs(5))
        await journal.claim(W, lease=60, limit=5)
        writes = [
            journal.record(W, f"PO-{i:04d}", JobState.QUOTED, cost=Decimal(i)) for i in range(5)
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
