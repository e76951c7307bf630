"""The rules of riding out a lost store connection (issue 12), on a store that cuts calls.

:class:`Cutting` wraps a SQLite journal in memory and cuts its next calls as a crashed
server would: before the call reaches the store, or after it committed (the answer lost).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from shipping_async.bulk._outage import IntentUnsettled, SteadyJournal
from shipping_async.bulk.journal import (
    JobRecord,
    JobState,
    JournalUnavailableError,
    LeaseLostError,
)
from shipping_async.bulk.sqlite_journal import SQLiteJournal
from tests.bulk.support import make_job


class Cutting:
    """A journal whose next ``before`` calls never arrive and next ``after`` calls commit
    but lose their answer (``ConnectionResetError``, as asyncpg raises on a cut socket)."""

    def __init__(self, store: SQLiteJournal) -> None:
        self.store = store
        self.before = 0
        self.after = 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)
        if not asyncio.iscoroutinefunction(method):
            return method

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.before:
                self.before -= 1
                raise ConnectionResetError("connection reset by peer")
            result = await method(*args, **kwargs)
            if self.after:
                self.after -= 1
                raise ConnectionResetError("connection reset by peer")
            return result

        return call


@pytest.fixture
async def cutting() -> AsyncIterator[Cutting]:
    store = await SQLiteJournal.open(":memory:")
    await store.add([make_job("J-1")])
    yield Cutting(store)
    await store.close()


async def claimed(journal: SteadyJournal) -> JobRecord:
    (record,) = await journal.claim("w1", lease=60, limit=1)
    return record


async def quoted(journal: SteadyJournal) -> JobRecord:
    record = await claimed(journal)
    assert record.claim_token is not None
    return await journal.record(record.claim_token, "J-1", JobState.QUOTED, quote_id=1)


async def test_a_finish_whose_answer_was_lost_is_found_committed_not_refused(
    cutting: Cutting,
) -> None:
    journal = SteadyJournal(cutting)  # type: ignore[arg-type]
    record = await claimed(journal)
    assert record.claim_token is not None
    cutting.after = 1  # committed (token dropped); the repeat is refused; the row tells
    done = await journal.finish(record.claim_token, "J-1", JobState.DONE)
    assert done.state is JobState.DONE
    assert done.claim_token is None


async def test_a_withdrawal_whose_answer_was_lost_is_found_committed(cutting: Cutting) -> None:
    journal = SteadyJournal(cutting)  # type: ignore[arg-type]
    record = await quoted(journal)
    token = record.claim_token
    assert token is not None
    await journal.begin_order(token, "J-1", quote_id=1, estimate_id=2)
    cutting.after = 1
    back = await journal.withdraw_order(token, "J-1")
    assert back.state is JobState.QUOTED


@pytest.mark.parametrize(
    ("before", "after", "committed"),
    [
        pytest.param(1, 0, False, id="never-arrived"),
        pytest.param(0, 1, True, id="committed-answer-lost"),
    ],
)
async def test_a_lost_order_intent_is_never_repeated_blindly(
    cutting: Cutting, before: int, after: int, committed: bool
) -> None:
    journal = SteadyJournal(cutting)  # type: ignore[arg-type]
    record = await quoted(journal)
    token = record.claim_token
    assert token is not None
    cutting.before, cutting.after = before, after
    with pytest.raises(IntentUnsettled):
        await journal.begin_order(token, "J-1", quote_id=1, estimate_id=2)
    # The caller reads the row to learn which: the intent committed, or it did not.
    row = await journal.get("J-1")
    assert row is not None
    assert row.state is (JobState.ORDERING if committed else JobState.QUOTED)
    assert row.claim_token == token


async def test_an_outage_is_waited_out_and_logged_once_each_way(
    cutting: Cutting, caplog: pytest.LogCaptureFixture
) -> None:
    journal = SteadyJournal(cutting)  # type: ignore[arg-type]
    cutting.before = 5
    with caplog.at_level(logging.WARNING, logger="shipping_async.bulk.journal"):
        counts = await journal.counts()
    assert counts[JobState.PENDING] == 1
    assert caplog.text.count("journal store unreachable") == 1
    assert caplog.text.count("journal store answers again") == 1
    assert not journal.away
    assert journal.up.is_set()


async def test_one_cut_connection_that_the_retry_replaces_is_not_an_outage(
    cutting: Cutting, caplog: pytest.LogCaptureFixture
) -> None:
    journal = SteadyJournal(cutting)  # type: ignore[arg-type]
    cutting.before = 1  # a pooled connection the server closed: the next one works
    with caplog.at_level(logging.WARNING, logger="shipping_async.bulk.journal"):
        await journal.counts()
    assert "journal store" not in caplog.text


async def test_an_outage_longer_than_max_outage_ends_every_waiting_call(cutting: Cutting) -> None:
    journal = SteadyJournal(cutting, max_outage=0.3)  # type: ignore[arg-type]
    cutting.before = 10**9
    started = time.monotonic()
    calls: list[Callable[[], Awaitable[object]]] = [journal.counts, lambda: journal.get("J-1")]
    results = await asyncio.gather(*(call() for call in calls), return_exceptions=True)
    assert all(isinstance(result, JournalUnavailableError) for result in results), results
    assert "longer than --max-store-outage 0.3" in str(results[0])
    assert time.monotonic() - started < 2.0


async def test_the_watcher_ends_the_run_when_nobody_is_asking_the_store(cutting: Cutting) -> None:
    # Every job may be parked at the order gate: the watcher itself looks and gives up.
    journal = SteadyJournal(cutting, max_outage=0.3)  # type: ignore[arg-type]
    record = await quoted(journal)
    assert record.claim_token is not None
    cutting.before = 10**9
    for _ in range(2):  # the outage starts; the caller waits elsewhere, asking nothing
        with pytest.raises(IntentUnsettled):
            await journal.begin_order(record.claim_token, "J-1", quote_id=1, estimate_id=2)
    assert journal.away
    assert not journal.up.is_set()
    with pytest.raises(JournalUnavailableError):
        await asyncio.wait_for(journal.watch(), timeout=2)


async def test_the_watcher_finds_the_store_back_for_callers_parked_at_the_gate(
    cutting: Cutting,
) -> None:
    journal = SteadyJournal(cutting)  # type: ignore[arg-type]
    record = await quoted(journal)
    assert record.claim_token is not None
    cutting.before = 1
    with pytest.raises(IntentUnsettled):
        await journal.begin_order(record.claim_token, "J-1", quote_id=1, estimate_id=2)
    assert not journal.up.is_set()
    watcher = asyncio.create_task(journal.watch())
    try:
        await asyncio.wait_for(journal.up.wait(), timeout=2)
    finally:
        watcher.cancel()


async def test_a_claim_that_committed_as_its_connection_died_is_taken_back(
    cutting: Cutting, caplog: pytest.LogCaptureFixture
) -> None:
    # Its jobs are leased to this worker under a token it never heard of: rather than
    # wait out that lease (nobody renews it), the retry reads them back and adopts them.
    journal = SteadyJournal(cutting)  # type: ignore[arg-type]
    await cutting.store.add([make_job("J-2")])
    cutting.after = 1
    with caplog.at_level(logging.INFO, logger="shipping_async.bulk.journal"):
        claimed = await journal.claim("w1", lease=60, limit=2)
    assert [record.key for record in claimed] == ["J-1", "J-2"]
    for record in claimed:
        row = await journal.get(record.key)
        assert row is not None
        assert row.claim_token == record.claim_token  # the committed claim, not a second
        assert row.attempts == 1
    assert "took back 2 job(s)" in caplog.text


async def test_jobs_leased_to_others_or_held_are_not_taken_back(cutting: Cutting) -> None:
    journal = SteadyJournal(cutting)  # type: ignore[arg-type]
    await cutting.store.add([make_job("J-2"), make_job("J-3")])
    await journal.claim("w2", lease=60, limit=1, keys=["J-3"])  # another worker's
    (held,) = await journal.claim("w1", lease=60, limit=1, keys=["J-1"])  # worked on
    cutting.after = 1
    claimed = await journal.claim("w1", lease=60, limit=3, exclude=[held.key])
    assert [record.key for record in claimed] == ["J-2"]
    assert claimed[0].attempts == 1


class CutListing:
    """A journal whose listing of records is cut once, after ``at`` records."""

    def __init__(self, store: SQLiteJournal, at: int) -> None:
        self.store = store
        self.at = at

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def records(self, **options: Any) -> AsyncIterator[JobRecord]:
        async for record in self.store.records(**options):
            if self.at == 0:
                self.at = -1
                raise ConnectionResetError("connection reset by peer")
            self.at -= 1
            yield record


@pytest.mark.parametrize("states", [None, {JobState.PENDING}])
async def test_a_listing_cut_by_a_lost_connection_goes_on_where_it_was(
    cutting: Cutting, states: set[JobState] | None
) -> None:
    await cutting.store.add([make_job(f"J-{i}") for i in range(2, 6)])
    journal = SteadyJournal(CutListing(cutting.store, at=2))  # type: ignore[arg-type]
    keys = [record.key async for record in journal.records(states=states)]
    assert keys == ["J-1", "J-2", "J-3", "J-4", "J-5"]


async def test_evidence_is_recorded_and_read_across_an_outage(cutting: Cutting) -> None:
    journal = SteadyJournal(cutting)  # type: ignore[arg-type]
    cutting.before = 3  # a receiver's write waits the outage out, then counts once
    assert await journal.record_order_received([41]) == 1
    cutting.before = 3
    now = await journal.evidence_now()
    cutting.before = 3
    (event,) = await journal.order_received(since=now - timedelta(minutes=1))
    assert event.order_id == 41
    assert not journal.away


async def test_an_answer_to_a_call_begun_before_the_outage_does_not_end_it(
    cutting: Cutting, caplog: pytest.LogCaptureFixture
) -> None:
    # A crashing server still answers some calls in flight: they prove nothing, and the
    # order gate stays closed until a call begun since the outage started is answered.
    answer = asyncio.Event()

    class Slow:
        def __getattr__(self, name: str) -> Any:
            return getattr(cutting, name)

        async def counts(self) -> dict[JobState, int]:
            await answer.wait()
            return await cutting.store.counts()

    journal = SteadyJournal(Slow())  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="shipping_async.bulk.journal"):
        early = asyncio.create_task(journal.counts())
        await asyncio.sleep(0)
        cutting.before = 10**9
        waiting = asyncio.create_task(journal.get("J-1"))
        await asyncio.sleep(0.3)  # tried again and again meanwhile
        assert "journal store unreachable" in caplog.text
        answer.set()
        await early
        assert journal.away
        assert not journal.up.is_set()
        cutting.before = 0
        assert await waiting is not None
    assert not journal.away
    assert caplog.text.count("journal store unreachable") == 1
    assert caplog.text.count("journal store answers again") == 1


async def test_after_an_outage_renewals_go_first_and_claims_wait(cutting: Cutting) -> None:
    # Leases lapse during a long outage; their workers renew them as soon as the store
    # is back, and only then may a claim take over what is still lapsed (dead workers').
    journal = SteadyJournal(cutting)  # type: ignore[arg-type]
    record = await claimed(journal)
    assert record.claim_token is not None
    cutting.before = 5
    await journal.counts()  # an outage, said and over
    started = time.monotonic()
    assert await journal.renew({"J-1": record.claim_token}, lease=60) == {"J-1"}
    renewed = time.monotonic() - started
    await cutting.store.add([make_job("J-2")])
    assert [r.key for r in await journal.claim("w2", lease=60, limit=1)] == ["J-2"]
    claimed_after = time.monotonic() - started
    assert renewed < 0.2 <= 0.4 < claimed_after < 2.0, (renewed, claimed_after)


async def test_a_call_waiting_out_its_backoff_goes_on_when_another_finds_the_store_back(
    cutting: Cutting, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(random, "uniform", lambda low, high: high)  # no jitter
    journal = SteadyJournal(cutting)  # type: ignore[arg-type]
    cutting.before = 10**9  # tried at 0, 0, 0.05, 0.15, 0.35, 0.75, next at 1.25 s
    started = time.monotonic()
    waiting = asyncio.create_task(journal.counts())
    await asyncio.sleep(0.85)
    assert journal.away
    cutting.before = 0
    # Another call (the watcher's look) finds the store back: the waiting call goes on
    # at once, not at its next attempt.
    await journal.get("J-1")
    await asyncio.wait_for(waiting, timeout=1)
    assert time.monotonic() - started < 1.1


@pytest.mark.parametrize("call", ["record", "renew", "get", "finish"])
@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param(0, 0, id="answered"),
        pytest.param(3, 0, id="outage"),
        pytest.param(0, 1, id="answer-lost"),
    ],
)
async def test_every_call_of_a_job_answers_alike_with_or_without_an_outage(
    cutting: Cutting, caplog: pytest.LogCaptureFixture, call: str, before: int, after: int
) -> None:
    # These calls take their first attempt inline (no closure while the store answers):
    # across an outage or a lost answer they end exactly as the plain answered call.
    journal = SteadyJournal(cutting)  # type: ignore[arg-type]
    record = await claimed(journal)
    token = record.claim_token
    assert token is not None
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "record": lambda: journal.record(token, "J-1", JobState.QUOTED, quote_id=7),
        "renew": lambda: journal.renew({"J-1": token}, lease=60),
        "get": lambda: journal.get("J-1"),
        "finish": lambda: journal.finish(token, "J-1", JobState.DONE),
    }
    cutting.before, cutting.after = before, after
    with caplog.at_level(logging.WARNING, logger="shipping_async.bulk.journal"):
        answer = await calls[call]()
    if call == "renew":
        assert answer == {"J-1"}
    else:
        assert answer is not None
        assert answer.key == "J-1"
    row = await cutting.store.get("J-1")
    assert row is not None
    expected = {"record": JobState.QUOTED, "finish": JobState.DONE}.get(call, JobState.PENDING)
    assert row.state is expected
    assert not journal.away
    assert journal.up.is_set()
    assert caplog.text.count("journal store unreachable") == (1 if before > 1 else 0)


@pytest.mark.parametrize("call", ["record", "finish"])
async def test_a_refused_write_is_raised_at_once_without_an_outage(
    cutting: Cutting, call: str
) -> None:
    journal = SteadyJournal(cutting)  # type: ignore[arg-type]
    await claimed(journal)
    refused: Callable[[], Awaitable[JobRecord]] = {
        "record": lambda: journal.record("not-the-token", "J-1", JobState.QUOTED),
        "finish": lambda: journal.finish("not-the-token", "J-1", JobState.FAILED),
    }[call]
    with pytest.raises(LeaseLostError):
        await refused()
    assert not journal.away
