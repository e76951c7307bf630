"""The reconciler on both journals, with a fake client: what the evidence proves, and no more."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from shipping_async.bulk.evidence import EvidenceJournal
from shipping_async.bulk.journal import JobState
from shipping_async.bulk.reconcile import Reconciler, reconcile
from shipping_async.bulk.sqlite_journal import SQLiteJournal
from shipping_async.clock import ManualClock
from shipping_async.errors import NotFoundError
from shipping_async.models.orders import Order
from shipping_async.models.webhooks import WebhookEvent
from shipping_async.scaleout.postgres_journal import PostgresJournal
from tests.bulk.support import make_job
from tests.pg_schemas import POSTGRES_DSN, own_schema

QUOTE = 900


class _Orders:
    def __init__(self, api: FakeOrders) -> None:
        self._api = api

    async def get(self, order_id: int, /) -> Order:
        self._api.reads.append(order_id)
        if order_id not in self._api.orders:
            raise NotFoundError(
                status=404, error="not found", errors=[], body=b"", method="GET", path="/orders"
            )
        reference, quote = self._api.orders[order_id]
        return Order(id=order_id, customer_reference=reference, quote_id=quote)


class FakeOrders:
    """GET /orders/{id} over a dict: order id -> (customer_reference, quote_id)."""

    def __init__(self) -> None:
        self.orders: dict[int, tuple[str, int | None]] = {}
        self.reads: list[int] = []
        self.orders_api = _Orders(self)


class FakeClient:
    def __init__(self) -> None:
        self.api = FakeOrders()

    @property
    def orders(self) -> _Orders:
        return self.api.orders_api


@pytest.fixture(params=["sqlite", "postgres"])
async def journal(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[EvidenceJournal]:
    if request.param == "sqlite":
        async with await SQLiteJournal.open(tmp_path / "j.journal") as store:
            yield store
        return
    async with own_schema() as schema:
        store = await PostgresJournal.open(POSTGRES_DSN, schema=schema)
        try:
            yield store
        finally:
            await store.close()


async def unknown(journal: EvidenceJournal, reference: str, key: str | None = None) -> str:
    """A job whose POST /orders got no usable answer: intent recorded, then UNKNOWN."""
    job = make_job(reference)
    if key is not None:
        job = type(job)(key=key, account=job.account, order=job.order, quote=job.quote)
    (record,) = await journal.add([job])
    (claimed,) = await journal.claim("w", lease=60, limit=1, keys=[record.key])
    token = claimed.claim_token
    assert token is not None
    await journal.record(token, record.key, JobState.QUOTED, quote_id=QUOTE, estimate_id=1)
    await journal.begin_order(token, record.key, quote_id=QUOTE, estimate_id=1)
    return token


async def give_up(journal: EvidenceJournal, key: str, token: str) -> None:
    await journal.finish(token, key, JobState.UNKNOWN, error="no answer")


def event(order_id: int, value: str = "order_received") -> WebhookEvent:
    return WebhookEvent(
        object_type="order",
        object_id=order_id,
        event_type="shipment.updated.status",
        original_value="",
        updated_value=value,
        updated_at_utc=ManualClock().now(),
        token="t",
    )


async def test_one_matching_order_settles_the_job_as_ordered_with_its_evidence(
    journal: EvidenceJournal,
) -> None:
    client = FakeClient()
    token = await unknown(journal, "PO-1")
    client.api.orders[41] = ("PO-1", QUOTE)
    client.api.orders[42] = ("PO-OTHER", QUOTE)
    await give_up(journal, "PO-1", token)
    report = await reconcile(journal, client, [event(42), event(41)], clock=ManualClock())
    assert [(s.key, s.order_id) for s in report.settled] == [("PO-1", 41)]
    record = await journal.get("PO-1")
    assert record is not None
    assert record.state is JobState.ORDERED
    assert record.order_id == 41
    assert record.evidence is not None
    assert "order 41" in record.evidence
    assert await journal.needs_reconciliation() == []


async def test_events_recorded_before_the_unknown_still_prove_the_order(
    journal: EvidenceJournal,
) -> None:
    client = FakeClient()
    token = await unknown(journal, "PO-1")
    client.api.orders[7] = ("PO-1", QUOTE)
    reconciler = Reconciler(journal, client, clock=ManualClock())
    await reconciler.record([event(7)])  # the event beats the timeout of the POST
    await give_up(journal, "PO-1", token)
    report = await reconciler.run_once()
    assert [(s.key, s.order_id) for s in report.settled] == [("PO-1", 7)]


async def test_duplicate_deliveries_and_hub_legs_are_one_order(journal: EvidenceJournal) -> None:
    client = FakeClient()
    token = await unknown(journal, "PO-1")
    client.api.orders[7] = ("PO-1", QUOTE)
    reconciler = Reconciler(journal, client, clock=ManualClock())
    assert await reconciler.record([event(7), event(7)]) == 1  # two legs
    assert await reconciler.record([event(7), event(7, "in_transit")]) == 0  # a retry
    await give_up(journal, "PO-1", token)
    (evidence,) = await journal.order_received(since=await journal.evidence_now() - _minute())
    assert evidence.order_id == 7
    assert evidence.deliveries == 3
    report = await reconciler.run_once()
    assert [s.order_id for s in report.settled] == [7]
    assert client.api.reads == [7]


async def test_two_matching_orders_leave_the_job_unknown_and_say_why(
    journal: EvidenceJournal,
) -> None:
    client = FakeClient()
    token = await unknown(journal, "PO-1")
    client.api.orders |= {7: ("PO-1", QUOTE), 8: ("PO-1", QUOTE)}
    await give_up(journal, "PO-1", token)
    report = await reconcile(journal, client, [event(7), event(8)], clock=ManualClock())
    assert report.settled == []
    (left,) = report.remaining
    assert "2 orders match" in left.reason
    assert "7, 8" in left.reason
    record = await journal.get("PO-1")
    assert record is not None
    assert record.state is JobState.UNKNOWN


async def test_two_jobs_with_one_reference_are_left_unknown(journal: EvidenceJournal) -> None:
    client = FakeClient()
    first = await unknown(journal, "PO-1", key="a")
    second = await unknown(journal, "PO-1", key="b")
    client.api.orders[7] = ("PO-1", QUOTE)
    await give_up(journal, "a", first)
    await give_up(journal, "b", second)
    report = await reconcile(journal, client, [event(7)], clock=ManualClock())
    assert report.settled == []
    assert sorted(r.key for r in report.remaining) == ["a", "b"]
    assert all("shared with" in r.reason for r in report.remaining)


async def test_an_order_another_job_holds_is_no_candidate(journal: EvidenceJournal) -> None:
    client = FakeClient()
    token = await unknown(journal, "PO-1")
    client.api.orders[7] = ("PO-1", QUOTE)
    await give_up(journal, "PO-1", token)
    await reconcile(journal, client, [event(7)], clock=ManualClock())
    # The same order announced again cannot settle a second unknown job.
    token2 = await unknown(journal, "PO-2")
    client.api.orders[8] = ("PO-1", QUOTE)
    await give_up(journal, "PO-2", token2)
    client.api.reads.clear()
    report = await reconcile(journal, client, [event(7)], clock=ManualClock())
    assert report.settled == []
    assert client.api.reads == []


async def test_a_different_quote_is_no_match(journal: EvidenceJournal) -> None:
    client = FakeClient()
    token = await unknown(journal, "PO-1")
    client.api.orders[7] = ("PO-1", QUOTE + 1)
    await give_up(journal, "PO-1", token)
    report = await reconcile(journal, client, [event(7)], clock=ManualClock())
    assert report.settled == []
    assert "no matching" in report.remaining[0].reason


async def test_an_event_older_than_the_intent_is_no_candidate(journal: EvidenceJournal) -> None:
    client = FakeClient()
    client.api.orders[7] = ("PO-1", QUOTE)
    reconciler = Reconciler(journal, client, clock=ManualClock(), skew=0.0)
    await reconciler.record([event(7)])  # an order made before this job's POST
    await asyncio.sleep(0.01)
    token = await unknown(journal, "PO-1")
    await give_up(journal, "PO-1", token)
    report = await reconciler.run_once()
    assert report.settled == []
    assert client.api.reads == []


async def test_silence_is_reported_and_acted_on_only_when_asked(journal: EvidenceJournal) -> None:
    client = FakeClient()
    token = await unknown(journal, "PO-1")
    await give_up(journal, "PO-1", token)
    # A horizon of 0.2 s (ManualClock: stated durations are taken as real seconds).
    quiet = Reconciler(journal, client, clock=ManualClock(), horizon=0.2)
    report = await quiet.run_once()
    assert "yet" in report.remaining[0].reason
    assert not report.remaining[0].silent
    await asyncio.sleep(0.25)
    report = await quiet.run_once()  # the horizon passed, but nothing else arrived either
    assert not report.remaining[0].silent
    assert "0 other events" in report.remaining[0].reason
    client.api.orders[50] = ("PO-OTHER", QUOTE)
    await quiet.record([event(50)])
    report = await quiet.run_once()
    (left,) = report.remaining
    assert left.silent
    assert "no order_received event in" in left.reason
    assert "1 other events arrived" in left.reason
    record = await journal.get("PO-1")
    assert record is not None
    assert record.state is JobState.UNKNOWN
    inactive = Reconciler(
        journal, client, horizon=0.2, resend_after_silence=True, webhook_active=_false
    )
    report = await inactive.run_once()
    assert report.resent == []
    assert "not active" in report.remaining[0].reason
    loud = Reconciler(journal, client, horizon=0.2, resend_after_silence=True)
    report = await loud.run_once()
    assert [s.key for s in report.resent] == ["PO-1"]
    record = await journal.get("PO-1")
    assert record is not None
    assert record.state is JobState.PENDING
    assert record.evidence is not None
    assert "silence" in record.evidence


async def _false() -> bool:
    return False


def _minute() -> Any:
    from datetime import timedelta

    return timedelta(minutes=1)


async def test_a_worker_s_passes_slow_down_while_only_a_person_can_decide(
    journal: EvidenceJournal,
) -> None:
    client = FakeClient()
    token = await unknown(journal, "PO-1")
    client.api.orders |= {7: ("PO-1", QUOTE), 8: ("PO-1", QUOTE)}  # ambiguous for good
    await give_up(journal, "PO-1", token)
    passes = 0

    class Counting(Reconciler):
        async def run_once(self) -> Any:
            nonlocal passes
            passes += 1
            return await super().run_once()

    reconciler = Counting(journal, client, clock=ManualClock())
    await reconciler.record([event(7), event(8)])
    stop = asyncio.Event()
    task = asyncio.create_task(reconciler.run_forever(stop, every=0.01, most=1.0))
    await asyncio.sleep(0.4)
    stop.set()
    await task
    assert 3 <= passes <= 8  # 0.01, 0.02, 0.04, ... rather than 40 passes


async def test_evidence_that_arrives_after_the_horizon_still_proves_the_order(
    journal: EvidenceJournal,
) -> None:
    # The receiver could not record the order's event in time (its journal store was
    # away; the API's last retry ran late on a loaded host): it is recorded after the
    # horizon, beside other events. The order exists: settled by it, never re-sent.
    client = FakeClient()
    token = await unknown(journal, "PO-1")
    await give_up(journal, "PO-1", token)
    reconciler = Reconciler(
        journal, client, clock=ManualClock(), horizon=0.2, resend_after_silence=True
    )
    await asyncio.sleep(0.25)  # the horizon passed with nothing recorded
    client.api.orders |= {7: ("PO-1", QUOTE), 50: ("PO-OTHER", QUOTE)}
    await reconciler.record([event(50), event(7)])  # the store is back: both land now
    report = await reconciler.run_once()
    assert report.resent == []
    assert [(s.key, s.order_id) for s in report.settled] == [("PO-1", 7)]
    record = await journal.get("PO-1")
    assert record is not None
    assert record.state is JobState.ORDERED
    assert record.order_id == 7
