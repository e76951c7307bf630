"""The order ledger settles itself from webhook evidence, by the reconciler's rules.

Against the sandbox with its webhooks delivered to a real receiver on loopback; judged by
the sandbox's request log and order list (one POST, one order per reference).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from resources.support import order_request, quote_request

from shipping_async import (
    AsyncShippingClient,
    ConfigurationError,
    LedgerReconciler,
    OrderOutcomeUnknownError,
    settle_from_webhooks,
)
from shipping_async.clock import SystemClock
from shipping_async.ledger import EvidenceLedger, OrderLedger
from shipping_async.models import Order
from shipping_async.models.webhooks import WebhookEvent
from shipping_async.sandbox import SandboxServer
from shipping_async.webhooks import WebhookReceiver, legs_from
from tests.ledgers import KINDS, open_ledger
from tests.webhooks.support import Endpoint

SPEED = 100.0
# The API's whole retry horizon (380 s) lasts 3.8 real s at speed 100; the silence tests
# run at 1000 (0.38 s), with a delivery timeout the loaded machine can meet (1 real s).
pytestmark = pytest.mark.shipping_sandbox(speed=SPEED, seed=61, delivery_timeout=100)


@pytest.fixture(params=KINDS)
async def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[OrderLedger]:
    async with open_ledger(request.param, tmp_path) as opened:
        yield opened


class App:
    """A web app's pieces: the client with its ledger, the receiver on loopback (the
    sandbox delivers to it), wired with settle_from_webhooks, and what the handler saw."""

    def __init__(self, client: AsyncShippingClient, receiver: WebhookReceiver) -> None:
        self.client = client
        self.receiver = receiver
        self.events: list[WebhookEvent] = []


@pytest.fixture
async def app(shipping_sandbox: SandboxServer, ledger: OrderLedger) -> AsyncIterator[App]:
    endpoint = Endpoint(SystemClock())
    async with AsyncShippingClient(order_ledger=ledger) as client:
        webhook = await client.webhooks.create(endpoint.url, ["shipment.updated.status"])
        events: list[WebhookEvent] = []

        async def on_event(event: WebhookEvent) -> None:
            events.append(event)

        receiver = await endpoint.start(on_event, token=webhook.token, legs=legs_from(client))
        try:
            async with settle_from_webhooks(client, receiver, webhook_id=webhook.id):
                running = App(client, receiver)
                running.events = events
                yield running
        finally:
            await endpoint.close()


def posts(sandbox: SandboxServer, reference: str) -> list[Any]:
    """The server's POST /orders records for ``reference`` (from the body it logged)."""
    return [
        record
        for record in sandbox.control.requests(method="POST", path="/orders")
        if record.body and json.loads(record.body)["order"]["customer_reference"] == reference
    ]


def orders_of(sandbox: SandboxServer, reference: str) -> list[int]:
    return [o["id"] for o in sandbox.control.orders() if o["customer_reference"] == reference]


async def until(condition: Callable[[], bool], what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


async def create(client: AsyncShippingClient, reference: str, *, hub: bool = False) -> Order:
    quote = await client.quotes.create(quote_request(hub_transit=hub))
    request = order_request(
        quote_estimate_id=quote.estimates[0].estimate_id, customer_reference=reference
    )
    return await client.orders.create(request)


async def test_a_lost_answer_settles_from_the_webhook_and_the_retry_gets_the_order_unsent(
    app: App, shipping_sandbox: SandboxServer
) -> None:
    control = shipping_sandbox.control
    # A hub order: created, the answer dropped; its two legs announce it twice.
    control.add_fault("drop_after", "/orders", method="POST")
    with pytest.raises(OrderOutcomeUnknownError):
        await create(app.client, "LOST-1", hub=True)
    (order_id,) = orders_of(shipping_sandbox, "LOST-1")

    # Both legs' events were delivered and handled (answered 200 after the ledger's pass).
    await until(lambda: len([e for e in app.events if e.object_id == order_id]) == 2, "the legs")
    retry = await create(app.client, "LOST-1", hub=True)

    assert retry.id == order_id
    assert len(posts(shipping_sandbox, "LOST-1")) == 1  # the retry sent nothing
    assert orders_of(shipping_sandbox, "LOST-1") == [order_id]
    entry = await app.client.order_ledger.get("LOST-1")  # type: ignore[union-attr]
    assert entry is not None
    assert (entry.state, entry.order_id) == ("ordered", order_id)
    assert entry.answer is not None  # the API's answer kept: later retries need no GET


async def test_evidence_that_came_before_the_answer_was_given_up_settles_it_too(
    app: App, shipping_sandbox: SandboxServer
) -> None:
    control = shipping_sandbox.control
    # Created at once, answered 2 real s later: past the client's timeout. The event
    # arrives while the create still waits; the periodic pass settles it afterwards.
    control.add_fault("delay_after", "/orders", method="POST", seconds=200)
    slow = app.client.with_options(timeout=0.5)
    with pytest.raises(OrderOutcomeUnknownError):
        await create(slow, "SLOW-1")
    (order_id,) = orders_of(shipping_sandbox, "SLOW-1")

    async def settled() -> bool:
        entry = await app.client.order_ledger.get("SLOW-1")  # type: ignore[union-attr]
        return entry is not None and entry.state == "ordered"

    deadline = time.monotonic() + 10
    while not await settled():
        assert time.monotonic() < deadline, "not settled"
        await asyncio.sleep(0.02)
    assert (await create(app.client, "SLOW-1")).id == order_id
    assert len(posts(shipping_sandbox, "SLOW-1")) == 1


FAST = pytest.mark.shipping_sandbox(speed=1000, seed=62, delivery_timeout=1000)


async def horizon_passed(settler: LedgerReconciler) -> None:
    await asyncio.sleep(settler.horizon_real.total_seconds() + 0.05)


@FAST
async def test_silence_frees_a_reference_only_when_opted_in_and_other_events_arrived(
    app: App, shipping_sandbox: SandboxServer
) -> None:
    control = shipping_sandbox.control
    # A gateway's 502: nothing was created, but the SDK cannot know that.
    control.add_fault("status", "/orders", method="POST", status=502)
    with pytest.raises(OrderOutcomeUnknownError):
        await create(app.client, "GW-1")
    reports = LedgerReconciler(app.client)
    frees = LedgerReconciler(app.client, resend_after_silence=True)

    (waiting,) = (await frees.run_once()).remaining
    await horizon_passed(frees)
    (quiet,) = (await frees.run_once()).remaining  # no other event either: no proof
    other = await create(app.client, "OTHER-1")
    await until(lambda: any(e.object_id == other.id for e in app.events), "the other event")
    (silent,) = (await reports.run_once()).remaining
    freed = await frees.run_once()
    retry = await create(app.client, "GW-1")

    assert waiting.waiting
    assert not quiet.silent
    assert "0 other events arrived" in quiet.reason
    assert silent.silent  # proven, and only reported without the opt-in
    assert [(s.key, s.order_id) for s in freed.resent] == [("GW-1", None)]
    assert orders_of(shipping_sandbox, "GW-1") == [retry.id]
    assert [r.status for r in posts(shipping_sandbox, "GW-1")] == [502, 201]


@FAST
async def test_a_create_whose_process_stopped_settles_from_evidence_never_from_silence(
    app: App, shipping_sandbox: SandboxServer
) -> None:
    ledger = app.client.order_ledger
    assert ledger is not None
    # A process claimed the reference, sent the order, and died before recording it.
    assert await ledger.claim("GONE-1") is None
    assert await ledger.claim("GONE-2") is None
    async with AsyncShippingClient() as other_process:
        sent = await create(other_process, "GONE-1")
    frees = LedgerReconciler(app.client, resend_after_silence=True)
    young = await frees.run_once()
    assert await create(app.client, "OTHER-2")

    await horizon_passed(frees)
    report = await frees.run_once()
    retry = await create(app.client, "GONE-1")

    assert sorted(r.reason for r in young.remaining) == ["a create of it is in flight"] * 2
    # Settled by this pass, or by the app's own passes (every second) just before it.
    assert [(s.key, s.order_id) for s in report.settled] in ([("GONE-1", sent.id)], [])
    settled = await ledger.get("GONE-1")
    assert settled is not None
    assert (settled.state, settled.order_id) == ("ordered", sent.id)
    (left,) = report.remaining
    assert left.key == "GONE-2"
    assert "when its request left is not known: no proof" in left.reason
    assert report.resent == []
    assert retry.id == sent.id
    assert len(posts(shipping_sandbox, "GONE-1")) == 1
    with pytest.raises(OrderOutcomeUnknownError):
        await create(app.client, "GONE-2")
    assert posts(shipping_sandbox, "GONE-2") == []


async def test_silence_frees_only_the_unknown_entry_it_judged_never_a_claim_made_since(
    ledger: OrderLedger,
) -> None:
    assert isinstance(ledger, EvidenceLedger)
    for reference in ("R-1", "R-2"):
        assert await ledger.claim(reference) is None
        await ledger.record_unknown(reference, "status 502")
    judged = {ref: (await ledger.get(ref)) for ref in ("R-1", "R-2")}
    # freed by another process meanwhile, and claimed again by a create now sending.
    await ledger.forget("R-2")
    assert await ledger.claim("R-2") is None

    freed = [
        await ledger.free_unknown(ref, updated_at=entry.updated_at)  # type: ignore[union-attr]
        for ref, entry in judged.items()
    ]

    assert freed == [True, False]
    assert await ledger.get("R-1") is None
    claim = await ledger.get("R-2")
    assert claim is not None
    assert claim.state == "sending"


class _BareLedger:
    """An OrderLedger of the user's own that keeps no evidence (its methods unused here)."""

    async def claim(self, customer_reference: str) -> None: ...
    async def record_order(self, customer_reference: str, order_id: int, answer: bytes) -> None: ...
    async def record_unknown(self, customer_reference: str, detail: str) -> None: ...
    async def forget(self, customer_reference: str) -> None: ...
    async def resolve(self, customer_reference: str, **kwargs: object) -> None: ...
    async def get(self, customer_reference: str) -> None: ...
    async def unresolved(self) -> list[Any]: ...
    async def aclose(self) -> None: ...


async def test_settling_from_webhooks_says_what_is_missing_before_anything_runs() -> None:
    receiver = WebhookReceiver(lambda event: asyncio.sleep(0), token="t")
    async with AsyncShippingClient("token", base_url="http://127.0.0.1:9") as client:
        with pytest.raises(ConfigurationError, match="needs a client with an order_ledger"):
            async with settle_from_webhooks(client, receiver):
                pass
    bare = _BareLedger()
    assert isinstance(bare, OrderLedger)
    async with AsyncShippingClient(
        "token",
        base_url="http://127.0.0.1:9",
        order_ledger=bare,  # type: ignore[arg-type]
    ) as client:
        with pytest.raises(ConfigurationError, match="keeps no order_received evidence"):
            async with settle_from_webhooks(client, receiver):
                pass
