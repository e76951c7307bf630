"""Tests of the leg lookup: which leg of an order an event is about."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shipping_async.models.orders import Order, Shipment
from shipping_async.models.webhooks import WebhookEvent
from shipping_async.webhooks import find_moved_leg, match_leg

from .support import TOKEN

AT = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def hub_order(*legs: tuple[str, str]) -> Order:
    """An order with one leg per ``(status, waybill)``."""
    return Order(
        id=81,
        status=legs[0][0],
        shipments=[Shipment(status=status, waybill=waybill) for status, waybill in legs],
    )


def status_event(original: str, updated: str, order_id: int = 81) -> WebhookEvent:
    return WebhookEvent(
        object_type="order",
        object_id=order_id,
        event_type="shipment.updated.status",
        original_value=original,
        updated_value=updated,
        updated_at_utc=AT,
        token=TOKEN,
    )


def waybill_event(waybill: str) -> WebhookEvent:
    return WebhookEvent(
        object_type="order",
        object_id=81,
        event_type="shipment.updated.waybill",
        original_value="",
        updated_value=waybill,
        updated_at_utc=AT,
        token=TOKEN,
    )


def test_status_event_names_the_one_leg_holding_the_new_status() -> None:
    order = hub_order(("in_transit", "PE1"), ("awaiting_schedule_pickup", "HL2"))

    match = match_leg(order, status_event("awaiting_pickup", "in_transit"))

    assert match.found
    assert match.index == 0
    assert match.shipment is order.shipments[0]
    assert not match.is_last_leg


def test_local_leg_moving_is_the_last_leg() -> None:
    order = hub_order(("delivered", "PE1"), ("in_transit", "HL2"))

    match = match_leg(order, status_event("awaiting_schedule_pickup", "in_transit"))

    assert (match.index, match.is_last_leg) == (1, True)


def test_waybill_event_is_matched_on_the_waybill_not_the_status() -> None:
    order = hub_order(("order_received", "PE1"), ("order_received", "HL2"))

    match = match_leg(order, waybill_event("HL2"))

    assert match.index == 1
    assert match.shipment is not None
    assert match.shipment.waybill == "HL2"


def test_two_legs_with_the_same_status_are_reported_ambiguous() -> None:
    order = hub_order(("delivered", "PE1"), ("delivered", "HL2"))

    match = match_leg(order, status_event("in_transit", "delivered"))

    assert match.ambiguous
    assert match.candidates == (0, 1)
    assert (match.found, match.index, match.shipment) == (False, None, None)


def test_no_leg_holding_the_value_any_more_is_not_found() -> None:
    order = hub_order(("delivered", "PE1"), ("in_transit", "HL2"))

    match = match_leg(order, status_event("order_received", "awaiting_pickup"))

    assert match.candidates == ()
    assert not match.found
    assert not match.ambiguous
    assert match.index is None


def test_direct_order_has_one_leg_which_is_also_the_last() -> None:
    order = hub_order(("in_transit", "PE1"))

    match = match_leg(order, status_event("awaiting_pickup", "in_transit"))

    assert (match.index, match.is_last_leg) == (0, True)


def test_event_of_another_order_is_refused() -> None:
    with pytest.raises(ValueError, match="order 99"):
        match_leg(hub_order(("in_transit", "PE1")), status_event("a", "in_transit", order_id=99))


def test_event_type_without_a_leg_field_is_refused() -> None:
    event = WebhookEvent(
        object_type="order",
        object_id=81,
        event_type="shipment.updated.weight",
        original_value="1",
        updated_value="2",
        updated_at_utc=AT,
        token=TOKEN,
    )

    with pytest.raises(ValueError, match=r"shipment\.updated\.weight"):
        match_leg(hub_order(("in_transit", "PE1")), event)


class _Orders:
    def __init__(self, order: Order) -> None:
        self.order = order
        self.asked: list[int] = []

    async def get(self, order_id: int, /) -> Order:
        self.asked.append(order_id)
        return self.order


class _Client:
    def __init__(self, order: Order) -> None:
        self.orders = _Orders(order)


async def test_find_moved_leg_reads_the_events_order() -> None:
    client = _Client(hub_order(("delivered", "PE1"), ("in_transit", "HL2")))

    match = await find_moved_leg(client, status_event("awaiting_schedule_pickup", "in_transit"))

    assert client.orders.asked == [81]
    assert match.index == 1
