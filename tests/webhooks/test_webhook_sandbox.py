"""End to end: the sandbox delivers real events to a real receiver on loopback."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import msgspec

from shipping_async._client import AsyncShippingClient
from shipping_async.models.webhooks import EventType, WebhookEvent
from shipping_async.sandbox import SandboxServer
from shipping_async.webhooks import (
    LegMatch,
    WebhookReceiver,
    event_key,
    find_moved_leg,
    legs_from,
)

from .support import Endpoint, place_order

EVENTS = [EventType.SHIPMENT_STATUS, EventType.SHIPMENT_WAYBILL]
RETRY_DELAYS = (20.0, 40.0, 60.0, 80.0)
#: Sandbox seconds a retry may come after its due time (scheduling, at 400x: 37 ms real).
SLACK = 15.0


class Recorder:
    def __init__(self) -> None:
        self.events: list[WebhookEvent] = []

    async def __call__(self, event: WebhookEvent) -> None:
        self.events.append(event)


def delivered_events(sandbox: SandboxServer) -> list[WebhookEvent]:
    """The events the sandbox got a 2xx for: one per delivery chain (its retries included),
    so the two legs' identical events of a hub order count twice."""
    return [
        msgspec.convert(record.body, WebhookEvent)
        for record in sandbox.control.deliveries()
        if record.result == "delivered"
    ]


async def settle(sandbox: SandboxServer, receiver: WebhookReceiver) -> None:
    await sandbox.control.wait_for_deliveries()
    await receiver.join()


async def test_hub_order_events_reach_the_receiver_once_each_with_the_leg_that_moved(
    sandbox: SandboxServer, client: AsyncShippingClient, endpoint: Endpoint
) -> None:
    webhook = await client.webhooks.create(endpoint.url, EVENTS)
    matches: list[tuple[WebhookEvent, LegMatch]] = []

    async def on_event(event: WebhookEvent) -> None:
        matches.append((event, await find_moved_leg(client, event)))

    receiver = await endpoint.start(on_event, token=webhook.token, legs=legs_from(client))
    order = await place_order(client, hub=True)
    await settle(sandbox, receiver)
    order = await client.orders.create_waybill(order.id)
    await settle(sandbox, receiver)
    for leg, status in ((0, "in_transit"), (0, "delivered"), (1, "in_transit")):
        sandbox.control.set_status(order.id, status, leg=leg)
        await settle(sandbox, receiver)

    seen = [(e.event_type, e.updated_value, m.candidates) for e, m in matches]
    clearance, local = order.waybills
    # Both legs' order_received events are byte-identical; each reaches the handler.
    assert seen.count(("shipment.updated.status", "order_received", (0, 1))) == 2
    assert seen[-5:] == [
        ("shipment.updated.waybill", clearance, (0,)),
        ("shipment.updated.waybill", local, (1,)),
        ("shipment.updated.status", "in_transit", (0,)),
        ("shipment.updated.status", "delivered", (0,)),
        ("shipment.updated.status", "in_transit", (1,)),
    ]
    assert all(event.object_id == order.id for event, _ in matches)
    received = [event_key(event) for event, _ in matches]
    assert sorted(received) == sorted(event_key(e) for e in delivered_events(sandbox))
    assert receiver.stats.bad_token == receiver.stats.bad_payload == 0


async def test_direct_order_delivered_event_names_its_only_leg(
    sandbox: SandboxServer, client: AsyncShippingClient, endpoint: Endpoint
) -> None:
    webhook = await client.webhooks.create(endpoint.url, [EventType.SHIPMENT_STATUS])
    recorder = Recorder()
    receiver = await endpoint.start(recorder, token=webhook.token)
    order = await place_order(client, hub=False)
    sandbox.control.set_status(order.id, "in_transit")
    sandbox.control.set_status(order.id, "delivered")
    await settle(sandbox, receiver)

    assert [(e.original_value, e.updated_value) for e in recorder.events] == [
        ("", "order_received"),
        ("order_received", "in_transit"),
        ("in_transit", "delivered"),
    ]
    match = await find_moved_leg(client, recorder.events[-1])
    assert (match.index, match.is_last_leg) == (0, True)


async def test_lost_answer_is_retried_20_s_later_and_the_receiver_drops_the_duplicate(
    sandbox: SandboxServer, client: AsyncShippingClient, endpoint: Endpoint
) -> None:
    webhook = await client.webhooks.create(endpoint.url, [EventType.SHIPMENT_STATUS])
    recorder = Recorder()
    receiver = await endpoint.start(recorder, token=webhook.token)
    order = await place_order(client, hub=False)
    await settle(sandbox, receiver)
    endpoint.lose_answers = 1
    sandbox.control.set_status(order.id, "in_transit")
    await settle(sandbox, receiver)

    (first, accepted), (retry, duplicate) = endpoint.arrivals[-2:]
    assert (accepted, duplicate) == (200, 200)
    assert RETRY_DELAYS[0] <= retry - first < RETRY_DELAYS[0] + SLACK
    assert [e.updated_value for e in recorder.events] == ["order_received", "in_transit"]
    assert receiver.stats.duplicates == 1
    attempts = [r for r in sandbox.control.deliveries() if r.body["updated_value"] == "in_transit"]
    assert [(r.attempt, r.result) for r in attempts] == [(1, "http_error"), (2, "delivered")]
    assert (await client.webhooks.get(webhook.id)).status == "active"


async def test_refused_deliveries_are_retried_on_schedule_then_the_webhook_turns_failing(
    sandbox: SandboxServer, client: AsyncShippingClient, endpoint: Endpoint
) -> None:
    webhook = await client.webhooks.create(endpoint.url, [EventType.SHIPMENT_STATUS])
    recorder = Recorder()
    # A receiver given the wrong token (a deploy mistake) refuses every delivery with 401.
    receiver = await endpoint.start(recorder, token="whk_some_other_webhook")
    order = await place_order(client, hub=False)
    await settle(sandbox, receiver)

    times = [at for at, _ in endpoint.arrivals]
    assert [status for _, status in endpoint.arrivals] == [401] * 5
    gaps = [later - earlier for earlier, later in pairwise(times)]
    for gap, delay in zip(gaps, RETRY_DELAYS, strict=True):
        assert delay <= gap < delay + SLACK
    assert (await client.webhooks.get(webhook.id)).status == "failing"
    assert recorder.events == []
    assert receiver.stats.bad_token == 5

    sandbox.control.set_status(order.id, "in_transit")
    await settle(sandbox, receiver)
    assert len(endpoint.arrivals) == 5  # a failing webhook is sent nothing more


async def test_receiver_sees_every_leg_event_of_many_orders_once(
    sandbox: SandboxServer, client: AsyncShippingClient, endpoint: Endpoint
) -> None:
    webhook = await client.webhooks.create(endpoint.url, EVENTS)
    recorder = Recorder()
    receiver = await endpoint.start(recorder, token=webhook.token, legs=legs_from(client))
    orders = [await place_order(client, hub=index % 2 == 0) for index in range(6)]
    endpoint.lose_answers = 3  # the first three answers are lost: three retries
    for order in orders:
        await client.orders.create_waybill(order.id)
        sandbox.control.set_status(order.id, "in_transit")
    await settle(sandbox, receiver)

    received: list[Any] = [event_key(event) for event in recorder.events]
    assert sorted(received) == sorted(event_key(e) for e in delivered_events(sandbox))
    assert len(received) > len(set(received))  # hub legs' identical events, each handled
    assert receiver.stats.duplicates == 3  # the retries of the three lost answers
    assert {e.object_id for e in recorder.events} == {order.id for order in orders}
