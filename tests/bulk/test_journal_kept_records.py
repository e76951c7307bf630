"""The SQLite journal writes under a claim from the record it keeps: same records, same fences.

A write under a claim is one ``UPDATE`` fenced by the claim token in its ``WHERE`` and a
record built from the kept one; without a kept record (or when the row does not match)
the row is read first. Both ways must give the record the row holds, and refuse the
same writes.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from datetime import date, time
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import pytest

from shipping_async.bulk import _sqlite_writer
from shipping_async.bulk.journal import (
    JobRecord,
    JobState,
    JournalStateError,
    LeaseLostError,
)
from shipping_async.bulk.sqlite_journal import SQLiteJournal
from shipping_async.clock import ManualClock
from tests.bulk.support import make_jobs

W = "worker-1"


async def _one_of_each(
    journal: SQLiteJournal, *, forget: bool, check: Callable[[JobRecord], Awaitable[None]]
) -> list[JobRecord]:
    """A happy path, a withdrawn intent, a re-quote and a failure, each write's record
    (handed to ``check`` as it comes); ``forget``: drop what the journal keeps before
    every write (each reads its row)."""

    def maybe_forget() -> None:
        if forget:
            journal._forget()

    await journal.add(make_jobs(2))
    tokens = {r.key: r.claim_token or "" for r in await journal.claim(W, lease=60, limit=2)}
    a, b = tokens["PO-0000"], tokens["PO-0001"]
    quote: dict[str, Any] = {
        "quote_id": 7,
        "estimate_id": 11,
        "carrier": "Sandbox Freight",
        "service": "Standard",
        "cost": Decimal("42.50"),
        "currency": "USD",
        "hub": True,
    }
    requote: Any = {"carrier": "Other Freight", "cost": Decimal("43.10"), "hub": False}
    steps: list[Any] = [
        lambda: journal.record(a, "PO-0000", JobState.QUOTED, **quote),
        lambda: journal.begin_order(a, "PO-0000", quote_id=7, estimate_id=11),
        lambda: journal.withdraw_order(a, "PO-0000"),
        lambda: journal.record(a, "PO-0000", JobState.PENDING),  # the estimate expired
        # Quoted again and ordered at once: the quote goes with the intent.
        lambda: journal.begin_order(a, "PO-0000", quote_id=8, estimate_id=12, quote=requote),
        lambda: journal.record(a, "PO-0000", JobState.ORDERED, order_id=501),
        lambda: journal.record(a, "PO-0000", JobState.WAYBILLED, waybills=["WB1", None], hub=False),
        lambda: journal.finish(
            a,
            "PO-0000",
            JobState.DONE,
            pickup_date=date(2030, 1, 2),
            pickup_from=time(9),
            pickup_to=time(12),
            pickup_confirmation="PU-1",
        ),
        lambda: journal.record(b, "PO-0001", JobState.QUOTED, **quote),
        lambda: journal.finish(
            b,
            "PO-0001",
            JobState.FAILED,
            error="no estimate in EUR",
            error_stage="order",
            retryable=True,
        ),
    ]
    records = []
    for step in steps:
        maybe_forget()
        records.append(await step())
        await check(records[-1])
    again = await journal.claim(W, lease=60, limit=1, retry_failed=True)  # the failed one
    await check(again[0])
    maybe_forget()
    records.append(again[0])
    records.append(
        await journal.record(again[0].claim_token or "", "PO-0001", JobState.QUOTED, **quote)
    )
    await check(records[-1])
    return records


async def test_every_write_returns_the_record_its_row_holds(tmp_path: Path) -> None:
    async with await SQLiteJournal.open(tmp_path / "batch.journal") as journal:

        async def as_stored(record: JobRecord) -> None:
            assert await journal.get(record.key) == record

        records = await _one_of_each(journal, forget=False, check=as_stored)
        assert [record.state for record in records[-4:]] == [
            JobState.QUOTED,
            JobState.FAILED,
            JobState.PENDING,  # claimed again: from its last success, the error cleared
            JobState.QUOTED,
        ]
        assert records[-2].error is None


async def _nothing(_: JobRecord) -> None:
    return None


def _timeless(record: JobRecord) -> JobRecord:
    return msgspec.structs.replace(
        record, updated_at=None, lease_until=None, order_intent_at=None, claim_token=None
    )


async def test_writes_from_kept_records_and_from_rows_give_the_same_records(
    tmp_path: Path,
) -> None:
    async with await SQLiteJournal.open(tmp_path / "kept.journal") as kept:
        fast = await _one_of_each(kept, forget=False, check=_nothing)
        rows_kept = [await kept.get(key) for key in ("PO-0000", "PO-0001")]
    async with await SQLiteJournal.open(tmp_path / "read.journal") as read:
        slow = await _one_of_each(read, forget=True, check=_nothing)
        rows_read = [await read.get(key) for key in ("PO-0000", "PO-0001")]
    assert [_timeless(r) for r in fast] == [_timeless(r) for r in slow]
    assert [_timeless(r) for r in rows_kept if r] == [_timeless(r) for r in rows_read if r]
    # The intents were stamped, with the real time, both ways.
    assert fast[5].order_intent_at is not None
    assert slow[5].order_intent_at is not None


async def test_a_stale_claim_is_refused_by_its_row_though_its_record_was_kept(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    async with await SQLiteJournal.open(tmp_path / "batch.journal", clock=clock) as journal:
        await journal.add(make_jobs(1))
        [first] = await journal.claim(W, lease=10, limit=1)
        stale = first.claim_token or ""
        await journal.record(stale, "PO-0000", JobState.QUOTED, quote_id=1, estimate_id=2)
        clock.advance(11)
        [second] = await journal.claim("worker-2", lease=10, limit=1)
        with pytest.raises(LeaseLostError):
            await journal.record(stale, "PO-0000", JobState.QUOTED, quote_id=3)
        with pytest.raises(LeaseLostError):
            await journal.begin_order(stale, "PO-0000", quote_id=1, estimate_id=2)
        current = second.claim_token or ""
        intent = await journal.begin_order(current, "PO-0000", quote_id=1, estimate_id=2)
        assert intent.state is JobState.ORDERING
        assert intent.lease_owner == "worker-2"
        assert await journal.get("PO-0000") == intent


async def test_an_intent_needs_a_live_lease_and_a_renewal_gives_it_back(tmp_path: Path) -> None:
    clock = ManualClock()
    async with await SQLiteJournal.open(tmp_path / "batch.journal", clock=clock) as journal:
        await journal.add(make_jobs(1))
        [claimed] = await journal.claim(W, lease=10, limit=1)
        token = claimed.claim_token or ""
        await journal.record(token, "PO-0000", JobState.QUOTED, quote_id=1, estimate_id=2)
        clock.advance(11)
        with pytest.raises(LeaseLostError, match="lapsed"):
            await journal.begin_order(token, "PO-0000", quote_id=1, estimate_id=2)
        assert await journal.renew({"PO-0000": token}, lease=10) == {"PO-0000"}
        intent = await journal.begin_order(token, "PO-0000", quote_id=1, estimate_id=2)
        assert intent.lease_until == (await journal.get("PO-0000") or intent).lease_until
        assert intent.lease_until is not None
        assert intent.lease_until > clock.now()
        with pytest.raises(JournalStateError):
            await journal.begin_order(token, "PO-0000", quote_id=1, estimate_id=2)
        assert await journal.get("PO-0000") == intent


@pytest.fixture
def group_commits(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The SQLite writer's group commits, one item each (clear it to count from now)."""
    made: list[object] = []
    commit = _sqlite_writer.commit

    def counted(db: Any) -> None:
        made.append(db)
        commit(db)

    monkeypatch.setattr(_sqlite_writer, "commit", counted)
    return made


async def test_intents_ready_together_share_one_commit_with_the_writes_queued_beside(
    tmp_path: Path, group_commits: list[object]
) -> None:
    # Orders ready in the same turn of the loop (a window's first burst, a run whose
    # limit is lifted): their intents are group-committed, one fsync for them all.
    async with await SQLiteJournal.open(tmp_path / "batch.journal") as journal:
        await journal.add(make_jobs(4))
        tokens = {r.key: r.claim_token or "" for r in await journal.claim(W, lease=60, limit=4)}
        ordering = ("PO-0000", "PO-0001", "PO-0002")
        for key in ordering:
            await journal.record(tokens[key], key, JobState.QUOTED, quote_id=1, estimate_id=2)
        group_commits.clear()
        intents = await asyncio.gather(
            *(journal.begin_order(tokens[k], k, quote_id=1, estimate_id=2) for k in ordering),
            journal.record(tokens["PO-0003"], "PO-0003", JobState.QUOTED, quote_id=2),
        )
        assert [record.state for record in intents] == [JobState.ORDERING] * 3 + [JobState.QUOTED]
        assert len(group_commits) == 1
        for key in ordering:  # each request's mark, right before its first byte
            journal.sending(key)
        for record in intents:
            assert await journal.get(record.key) == record


async def test_writes_queued_while_an_intent_is_withdrawn_ride_in_its_commit(
    tmp_path: Path, group_commits: list[object]
) -> None:
    # The withdrawal after a 429 commits at once on the loop's thread; what was queued
    # meanwhile goes into its transaction instead of waiting for a group commit.
    async with await SQLiteJournal.open(tmp_path / "batch.journal") as journal:
        await journal.add(make_jobs(4))
        tokens = {r.key: r.claim_token or "" for r in await journal.claim(W, lease=60, limit=4)}
        await journal.record(tokens["PO-0000"], "PO-0000", JobState.QUOTED, quote_id=1)
        await journal.begin_order(tokens["PO-0000"], "PO-0000", quote_id=1, estimate_id=2)
        group_commits.clear()
        riders = [
            asyncio.ensure_future(journal.record(tokens[key], key, JobState.QUOTED, quote_id=2))
            for key in ("PO-0001", "PO-0002", "PO-0003")
        ]
        await asyncio.sleep(0)  # queued, their group commit not started
        withdrawn = await journal.withdraw_order(tokens["PO-0000"], "PO-0000")
        assert withdrawn.state is JobState.QUOTED
        assert [record.quote_id for record in await asyncio.gather(*riders)] == [2, 2, 2]
        assert len(group_commits) == 0  # they were answered by the withdrawal's commit


def test_claim_tokens_are_never_reused_not_even_by_a_forked_child() -> None:
    from shipping_async.bulk._journal_store import new_token

    mine = {new_token() for _ in range(1000)}
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        os.write(writer, " ".join(new_token() for _ in range(100)).encode())
        os._exit(0)
    os.close(writer)
    mine |= {new_token() for _ in range(100)}  # the parent goes on after the fork too
    os.waitpid(child, 0)
    with os.fdopen(reader) as pipe:
        theirs = set(pipe.read().split())
    assert len(mine) == 1100
    assert len(theirs) == 100
    assert not mine & theirs


async def test_a_claim_skips_left_out_jobs_whose_lease_lapsed_and_still_fills_its_limit(
    tmp_path: Path,
) -> None:
    # The claim's query limits its rows to what it needs: the jobs left out can only be
    # among them when their lease lapsed, and then they must not take a wanted job's row.
    clock = ManualClock()
    async with await SQLiteJournal.open(tmp_path / "batch.journal", clock=clock) as journal:
        await journal.add(make_jobs(4))
        first = await journal.claim(W, lease=10, limit=2)
        clock.advance(11)
        left_out = [record.key for record in first]
        [next_one] = await journal.claim(W, lease=10, limit=1, exclude=left_out)
        assert next_one.key == "PO-0002"
        live = await journal.claim(W, lease=10, limit=1, exclude=[*left_out, "PO-0002"])
        assert [record.key for record in live] == ["PO-0003"]
