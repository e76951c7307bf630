"""Claim-token fencing and the intent that is the send, on a manual clock and a fake API.

A task whose lease lapsed while it waited for its permit, or while its POST /orders was
on the wire, may find the job claimed again - by the same worker. Its writes must then
be refused and it must send nothing: the job is ordered once, by the current claim.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from shipping_async.bulk._gate import OrderGate
from shipping_async.bulk._leases import Claims
from shipping_async.bulk.choice import cheapest
from shipping_async.bulk.journal import JobRecord, JobState, LeaseLostError
from shipping_async.bulk.pipeline import JobPipeline
from shipping_async.bulk.sqlite_journal import SQLiteJournal
from shipping_async.bulk.worker import Worker
from shipping_async.clock import ManualClock
from tests.bulk.fakes import FakeAPI, rate_limited, settle
from tests.bulk.support import make_job

W = "host:1:same-worker"  # both claims are this one worker's
LEASE = 10.0


def pipeline(api: FakeAPI, journal: SQLiteJournal) -> JobPipeline:
    """A task's pipeline, as the runner builds it (one per run; here one per claim)."""
    return JobPipeline(
        api,
        journal,
        choose=cheapest(),
        gate=OrderGate(api.order_limiter, api.clock, asyncio.Event()),
        quote_ahead=api.order_limiter.limit,
        lease=LEASE,
    )


async def until(condition: Callable[[], Awaitable[bool]]) -> None:
    """Wait (real time, at most 5 s) until ``condition()`` holds."""
    for _ in range(2500):
        if await condition():
            return
        await asyncio.sleep(0.002)
    raise AssertionError("the condition never held")


async def state_of(journal: SQLiteJournal, key: str) -> JobState:
    record = await journal.get(key)
    assert record is not None
    return record.state


async def run_clock(clock: ManualClock, *tasks: asyncio.Task[JobRecord], step: float = 1) -> None:
    """Advance time a step at a time until every task is done (at most 10 minutes)."""
    for _ in range(600):
        await settle(rounds=5)
        if all(task.done() for task in tasks):
            return
        clock.advance(step)
    raise AssertionError("the tasks did not finish")


async def claim(journal: SQLiteJournal, key: str, lease: float = LEASE) -> list[JobRecord]:
    return await journal.claim(W, lease=lease, limit=1, keys=[key])


async def test_a_task_whose_lease_lapsed_while_waiting_for_its_permit_sends_nothing(
    clock: ManualClock, journal: SQLiteJournal
) -> None:
    api = FakeAPI(clock, limit=1)
    spent = await api.order_limiter.acquire()  # the window's one order went out just now
    await api.order_limiter.release(spent, sent=True)
    await journal.add([make_job("A")])
    [first] = await claim(journal, "A")
    stale = asyncio.create_task(pipeline(api, journal).ship(first))
    await settle(rounds=5)
    # Waiting for the permit (its turn comes before its quote, so nothing is quoted yet).
    assert api.sent == []
    assert api.calls["POST /quotes"] == 0
    assert not stale.done()

    clock.advance(LEASE + 1)  # no renewal: the lease lapses
    [second] = await claim(journal, "A", lease=600)  # the same worker claims it again
    assert second.claim_token != first.claim_token
    current = asyncio.create_task(pipeline(api, journal).ship(second))
    await run_clock(clock, stale, current)

    with pytest.raises(LeaseLostError):
        await stale
    done = await current
    assert done.state is JobState.DONE
    assert api.sent == ["A"]  # the stale task sent nothing
    assert api.created == {"A": 1}
    assert api.calls[f"POST /orders/{done.order_id}/waybill"] == 1
    assert api.calls[f"POST /orders/{done.order_id}/pickup"] == 1
    # Its permit was given back unsent: the limiter counts one order in flight, not two.
    assert api.order_limiter.available() == 0


async def test_a_stale_tasks_writes_are_refused_even_under_the_same_worker(
    journal: SQLiteJournal, clock: ManualClock
) -> None:
    await journal.add([make_job("A")])
    [first] = await claim(journal, "A")
    clock.advance(LEASE + 1)
    [second] = await claim(journal, "A")
    assert first.claim_token is not None
    assert second.claim_token is not None
    with pytest.raises(LeaseLostError):
        await journal.record(first.claim_token, "A", JobState.QUOTED, quote_id=1, estimate_id=2)
    with pytest.raises(LeaseLostError):
        await journal.finish(first.claim_token, "A", JobState.FAILED, error="stale")
    assert await journal.renew({"A": first.claim_token}, lease=LEASE) == set()
    quoted = await journal.record(
        second.claim_token, "A", JobState.QUOTED, quote_id=1, estimate_id=2
    )
    with pytest.raises(LeaseLostError):  # the intent, above all
        await journal.begin_order(first.claim_token, "A", quote_id=1, estimate_id=2)
    assert quoted.state is JobState.QUOTED
    assert (await journal.get("A")).state is JobState.QUOTED  # type: ignore[union-attr]


async def ship_until_on_the_wire(
    api: FakeAPI, journal: SQLiteJournal, key: str
) -> asyncio.Task[JobRecord]:
    """Claim ``key`` and ship it until its POST /orders is on the wire, held there."""
    api.hold(key)
    await journal.add([make_job(key)])
    [first] = await claim(journal, key)
    task = asyncio.create_task(pipeline(api, journal).ship(first))
    async with asyncio.timeout(5):
        await api.reached[key].wait()
    return task


async def test_a_task_whose_lease_lapsed_while_its_order_was_in_flight_records_the_truth(
    clock: ManualClock, journal: SQLiteJournal
) -> None:
    api = FakeAPI(clock)
    stale = await ship_until_on_the_wire(api, journal, "B")

    clock.advance(LEASE + 1)
    # The same worker claims again: a job found mid-order with its lease gone is not
    # handed out (it may have been sent) but becomes UNKNOWN.
    assert await claim(journal, "B") == []
    assert (await journal.get("B")).state is JobState.UNKNOWN  # type: ignore[union-attr]

    api.let_go("B")  # 201: the order exists
    with pytest.raises(LeaseLostError):
        await stale
    settled = await journal.get("B")
    assert settled is not None
    assert settled.state is JobState.ORDERED  # reconciled with the id it got, not unknown
    assert settled.order_id is not None
    assert api.calls[f"POST /orders/{settled.order_id}/waybill"] == 0  # the stale task stopped

    [again] = await claim(journal, "B")
    done = await pipeline(api, journal).ship(again)
    assert done.state is JobState.DONE
    assert done.order_id == settled.order_id
    assert api.sent == ["B"]
    assert api.created == {"B": 1}
    assert api.calls[f"POST /orders/{done.order_id}/waybill"] == 1


async def test_an_order_answered_after_the_job_was_resent_is_named_at_error(
    clock: ManualClock, journal: SQLiteJournal, caplog: pytest.LogCaptureFixture
) -> None:
    api = FakeAPI(clock)
    stale = await ship_until_on_the_wire(api, journal, "C")

    clock.advance(LEASE + 1)
    assert await claim(journal, "C") == []  # mid-order, lease gone: UNKNOWN
    # Someone judged the order never created (silence, by hand) and the job went on.
    await journal.reconcile("C", order_id=None, evidence="judged silent")

    api.let_go("C")  # 201 after all: this order exists although the journal let it go
    with caplog.at_level("ERROR", logger="shipping_async"), pytest.raises(LeaseLostError):
        await stale
    [line] = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert api.created == {"C": 1}
    assert line.startswith("job C: order 1001 was created, but the journal now holds state pending")


async def test_a_429_leaves_no_intent_behind_while_the_job_waits(
    clock: ManualClock, journal: SQLiteJournal
) -> None:
    api = FakeAPI(clock)
    api.answers = [rate_limited()]  # the first POST /orders: 429
    await journal.add([make_job("C")])
    [record] = await claim(journal, "C", lease=600)
    task = asyncio.create_task(pipeline(api, journal).ship(record))
    await until(lambda: _true(api.sent == ["C"]))  # answered 429: the limiter pauses
    # Withdrawn while the clock stands still inside the pause: a crash now leaves the
    # job quoted (resumable), not unknown.
    await until(lambda: _is(journal, "C", JobState.QUOTED))
    await settle(rounds=5)
    assert await state_of(journal, "C") is JobState.QUOTED
    assert api.sent == ["C"]
    await run_clock(clock, task)
    done = await task
    assert done.state is JobState.DONE
    assert api.sent == ["C", "C"]
    assert api.created == {"C": 1}


async def _is(journal: SQLiteJournal, key: str, state: JobState) -> bool:
    return await state_of(journal, key) is state


async def _true(value: bool) -> bool:
    return value


async def test_a_lone_worker_whose_leases_lapse_finishes_every_job_once_and_loses_none(
    clock: ManualClock, journal: SQLiteJournal
) -> None:
    # The runner on a SQLite journal, draining it as a worker does; the heartbeat is
    # stuck (a frozen journal), so every lease lapses while the jobs wait for permits.
    api = FakeAPI(clock, limit=2)
    keys = [f"L-{index}" for index in range(6)]
    await journal.add([make_job(key) for key in keys])
    worker = Worker(journal, lambda account: api, lease=LEASE, clock=clock, concurrency=4)
    worker.runner.claims = _StuckClaims(journal, clock, LEASE)
    results: list[str] = []

    async def drain() -> None:
        async for result in worker.run():
            results.append(result.key)

    task = asyncio.create_task(drain())
    for _ in range(600):
        await settle(rounds=5)
        if task.done():
            break
        clock.advance(1)
    await task
    assert sorted(results) == keys
    assert api.created == dict.fromkeys(keys, 1)
    assert worker.unfinished == {}
    assert (await journal.counts())[JobState.DONE] == len(keys)


class _StuckClaims(Claims):
    """Leases that are never renewed by the heartbeat."""

    async def heartbeat(self) -> None:
        await asyncio.Event().wait()
