"""Tests of the duplicate filter: same event dropped, memory bounded, oldest forgotten."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shipping_async.models.webhooks import WebhookEvent
from shipping_async.webhooks import EventDeduplicator

from .support import TOKEN

AT = datetime(2026, 1, 5, 9, 0, 0, 123000, tzinfo=UTC)


def event(
    order_id: int = 1, value: str = "in_transit", at: datetime = AT, **kw: str
) -> WebhookEvent:
    fields = {
        "object_type": "order",
        "event_type": "shipment.updated.status",
        "original_value": "order_received",
        "token": TOKEN,
    }
    fields.update(kw)
    return WebhookEvent(object_id=order_id, updated_value=value, updated_at_utc=at, **fields)


def test_second_delivery_of_the_same_event_is_a_duplicate() -> None:
    seen = EventDeduplicator(10)

    assert seen.check_and_add(event()) is True
    assert seen.check_and_add(event()) is False
    assert event() in seen


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(event(order_id=2), id="other-order"),
        pytest.param(event(value="delivered"), id="other-value"),
        pytest.param(event(original_value="in_transit"), id="other-original"),
        pytest.param(event(at=AT + timedelta(milliseconds=1)), id="other-millisecond"),
        pytest.param(event(event_type="shipment.updated.waybill"), id="other-type"),
    ],
)
def test_events_differing_in_order_type_values_or_time_are_distinct(other: WebhookEvent) -> None:
    seen = EventDeduplicator(10)
    seen.check_and_add(event())

    assert seen.check_and_add(other) is True


def test_memory_holds_at_most_max_events_and_forgets_the_oldest() -> None:
    seen = EventDeduplicator(3)
    for order_id in range(1, 6):
        seen.check_and_add(event(order_id))

    assert len(seen) == 3
    assert event(1) not in seen
    assert event(5) in seen
    assert seen.check_and_add(event(1)) is True  # forgotten, so accepted again


def test_a_repeated_delivery_keeps_its_event_remembered() -> None:
    seen = EventDeduplicator(2)
    seen.check_and_add(event(1))
    seen.check_and_add(event(2))
    seen.check_and_add(event(1))  # retry: 1 becomes the most recent
    seen.check_and_add(event(3))

    assert event(1) in seen
    assert event(2) not in seen


def test_zero_capacity_is_refused() -> None:
    with pytest.raises(ValueError, match="max_events"):
        EventDeduplicator(0)


@given(
    capacity=st.integers(1, 20),
    order_ids=st.lists(st.integers(1, 30), max_size=200),
)
def test_size_never_exceeds_capacity_and_recent_events_are_always_dropped(
    capacity: int, order_ids: list[int]
) -> None:
    seen = EventDeduplicator(capacity)
    for order_id in order_ids:
        seen.check_and_add(event(order_id))
        assert len(seen) <= capacity
        assert seen.check_and_add(event(order_id)) is False
