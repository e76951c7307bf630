"""A quote followed at once by its order is written with the order's intent, not alone.

The journal holds a quote as ``QUOTED`` only when its order does not follow at once: a
run that stops between the two records it; an estimate that expires before its order
leaves the job ``PENDING`` without a write; an order that fails before its intent keeps
the quote in the failed record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from shipping_async.bulk._gate import OrderGate
from shipping_async.bulk.choice import cheapest
from shipping_async.bulk.journal import JobRecord, JobState
from shipping_async.bulk.pipeline import JobPipeline, Stopped
from shipping_async.bulk.sqlite_journal import SQLiteJournal
from shipping_async.clock import ManualClock
from shipping_async.errors import APIConnectionError
from shipping_async.models import Order, OrderRequest, Quote, QuoteRequest
from tests.bulk.fakes import FakeAPI
from tests.bulk.support import make_job

KEY = "Q-1"
LEASE = 600.0


def _writes(journal: SQLiteJournal) -> list[tuple[str, JobState]]:
    """Every write of ``journal`` from now on, as (method, state it moves to)."""
    seen: list[tuple[str, JobState]] = []

    def spy(name: str, state_of: Callable[..., JobState]) -> None:
        method = getattr(journal, name)

        async def spied(*args: Any, **kwargs: Any) -> Any:
            seen.append((name, state_of(*args, **kwargs)))
            return await method(*args, **kwargs)

        setattr(journal, name, spied)

    spy("record", lambda token, key, state, **_: state)
    spy("finish", lambda token, key, state, **_: state)
    spy("begin_order", lambda *_, **__: JobState.ORDERING)
    spy("withdraw_order", lambda *_, **__: JobState.QUOTED)
    return seen


def _pipeline(
    api: FakeAPI, journal: SQLiteJournal, *, stop: asyncio.Event | None = None, **options: Any
) -> JobPipeline:
    gate = OrderGate(api.order_limiter, api.clock, stop or asyncio.Event())
    return JobPipeline(
        api, journal, choose=cheapest(), gate=gate, quote_ahead=20, lease=LEASE, **options
    )


async def _claimed(journal: SQLiteJournal) -> JobRecord:
    await journal.add([make_job(KEY)])
    [record] = await journal.claim("host:1:w", lease=LEASE, limit=1, keys=[KEY])
    return record


async def test_a_job_ordered_right_after_its_quote_writes_no_quoted_state(
    clock: ManualClock, journal: SQLiteJournal
) -> None:
    api = FakeAPI(clock)
    record = await _claimed(journal)
    writes = _writes(journal)

    done = await _pipeline(api, journal).ship(record)

    assert done.state is JobState.DONE
    assert [state for _, state in writes] == [
        JobState.ORDERING,  # the quote with it
        JobState.ORDERED,
        JobState.WAYBILLED,
        JobState.DONE,
    ]
    assert done.quote_id is not None
    assert done.carrier is not None
    assert done.cost is not None
    assert await journal.get(KEY) == done


class _StoppingQuotes:
    """Quotes that stop the run once answered: between a job's quote and its order."""

    def __init__(self, api: FakeAPI, stop: asyncio.Event) -> None:
        self._quotes = api.quotes
        self._stop = stop

    async def create(self, request: QuoteRequest, /) -> Quote:
        quote = await self._quotes.create(request)
        self._stop.set()
        return quote

    async def get(self, quote_id: int, /) -> Quote:
        return await self._quotes.get(quote_id)


async def test_a_run_stopped_between_a_quote_and_its_order_records_the_quote(
    clock: ManualClock, journal: SQLiteJournal
) -> None:
    api = FakeAPI(clock)
    stop = asyncio.Event()
    api.quotes = _StoppingQuotes(api, stop)  # type: ignore[assignment]
    record = await _claimed(journal)

    try:
        await _pipeline(api, journal, stop=stop).ship(record)
    except Stopped:
        pass
    else:
        raise AssertionError("the job went on after the run stopped")

    assert api.sent == []
    kept = await journal.get(KEY)
    assert kept is not None
    assert (kept.state, kept.quote_id) == (JobState.QUOTED, 501)  # checked by the next run
    assert kept.carrier is not None


class _AgingQuotes:
    """Quotes whose first answer comes back too late to be ordered (the clock moves on)."""

    def __init__(self, api: FakeAPI, clock: ManualClock) -> None:
        self._quotes = api.quotes
        self._clock = clock
        self.late = 1

    async def create(self, request: QuoteRequest, /) -> Quote:
        quote = await self._quotes.create(request)
        if self.late:
            self.late -= 1
            self._clock.advance(100.0)
        return quote

    async def get(self, quote_id: int, /) -> Quote:
        return await self._quotes.get(quote_id)


async def test_an_estimate_expired_before_its_order_is_quoted_again_without_a_write(
    clock: ManualClock, journal: SQLiteJournal
) -> None:
    api = FakeAPI(clock)
    api.quotes = _AgingQuotes(api, clock)  # type: ignore[assignment]
    record = await _claimed(journal)
    writes = _writes(journal)

    done = await _pipeline(api, journal, estimate_validity=60.0).ship(record)

    assert done.state is JobState.DONE
    assert api.calls["POST /quotes"] == 2
    assert [state for _, state in writes][:1] == [JobState.ORDERING]  # nothing before it
    assert api.created == {KEY: 1}


class _UnreachableOrders:
    """POST /orders fails before any intent (a client-side refusal)."""

    def __init__(self, api: FakeAPI) -> None:
        self._orders = api.orders

    async def create(self, request: OrderRequest, /) -> Order:
        raise APIConnectionError("no route to host", method="POST", path="/orders")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._orders, name)


async def test_an_order_failing_before_its_intent_keeps_the_quote_in_its_result(
    clock: ManualClock, journal: SQLiteJournal
) -> None:
    api = FakeAPI(clock)
    api.orders = _UnreachableOrders(api)  # type: ignore[assignment]
    record = await _claimed(journal)
    writes = _writes(journal)

    failed = await _pipeline(api, journal).ship(record)

    assert [state for _, state in writes] == [JobState.FAILED]
    assert (failed.state, failed.error_stage, failed.retryable) == (JobState.FAILED, "order", True)
    assert failed.quote_id == 501
    assert failed.carrier is not None
    assert await journal.get(KEY) == failed
