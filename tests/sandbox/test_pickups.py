"""Pickup availabilities and scheduling: rules 2-4 of spec 4.6, carrier rejections."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest

from shipping_async.clock import ManualClock
from shipping_async.sandbox import SandboxServer
from shipping_async.sandbox._pickups import NO_WAYBILL

from .support import INVALID, TOKEN, Api, address, order_body

# Monday 5 January 2026, 09:00 UTC = 04:00 in New York.
MONDAY_MORNING = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
Sandbox = Callable[..., AbstractAsyncContextManager[tuple[Api, ManualClock]]]


@pytest.fixture
def sandbox_at() -> Sandbox:
    @asynccontextmanager
    async def start(wall: datetime = MONDAY_MORNING) -> AsyncIterator[tuple[Api, ManualClock]]:
        clock = ManualClock(wall_origin=wall)
        async with (
            SandboxServer(token=TOKEN, clock=clock, seed=3) as server,
            aiohttp.ClientSession() as session,
        ):
            yield Api(session, server), clock

    return start


async def _ready_order(api: Api, *, hub: bool = False, waybill: bool = True, **kw: Any) -> int:
    order = await api.order(hub=hub, **kw)
    if waybill:
        reply = await api.call("POST", f"/orders/{order['id']}/waybills")
        assert reply.status == 201
    return int(order["id"])


def _pickup(day: str, start: str = "10:00", end: str = "12:00") -> dict[str, Any]:
    return {"scheduled_pickup": {"time_from": start, "time_to": end, "scheduled_date": day}}


async def test_availabilities_are_the_next_five_business_days(sandbox_at: Sandbox) -> None:
    async with sandbox_at() as (api, _):
        order_id = await _ready_order(api)
        reply = await api.call("GET", f"/orders/{order_id}/pickup_availabilities")
    assert reply.status == 200
    assert reply.body == [
        {
            "pickup_date": day,
            "cut_off_time": "16:00.00",
            "minimum_access_duration_minutes": 120,
            "earliest_pickup_time": "09:00.00",
            "time_zone_id": "America/New_York",
        }
        for day in ("05-01-2026", "06-01-2026", "07-01-2026", "08-01-2026", "09-01-2026")
    ]


async def test_availabilities_skip_the_weekend(sandbox_at: Sandbox) -> None:
    async with sandbox_at(datetime(2026, 1, 10, 12, 0, tzinfo=UTC)) as (api, _):  # Saturday
        order_id = await _ready_order(api)
        reply = await api.call("GET", f"/orders/{order_id}/pickup_availabilities")
    days = [slot["pickup_date"] for slot in reply.body]
    assert days == ["12-01-2026", "13-01-2026", "14-01-2026", "15-01-2026", "16-01-2026"]


async def test_availabilities_use_the_origin_time_zone(sandbox_at: Sandbox) -> None:
    async with sandbox_at() as (api, _):
        quote = await api.quote(origin_country_id=276, destination_country_id=840)
        body = order_body(quote["estimates"][0]["estimate_id"], destination=840)
        body["order"]["origin_address"] = address(276, city="Berlin")
        order = (await api.call("POST", "/orders", json=body)).body["order"]
        reply = await api.call("GET", f"/orders/{order['id']}/pickup_availabilities")
    assert {slot["time_zone_id"] for slot in reply.body} == {"Europe/Berlin"}


async def test_hub_order_availabilities_are_the_first_legs(sandbox_at: Sandbox) -> None:
    async with sandbox_at() as (api, _):
        order_id = await _ready_order(api, hub=True)
        reply = await api.call("GET", f"/orders/{order_id}/pickup_availabilities")
    assert {slot["time_zone_id"] for slot in reply.body} == {"America/New_York"}


async def test_unknown_order_is_404_on_both_endpoints(sandbox_at: Sandbox) -> None:
    async with sandbox_at() as (api, _):
        get = await api.call("GET", "/orders/999/pickup_availabilities")
        post = await api.call("POST", "/orders/999/schedule_pickups", json=_pickup("06-01-2026"))
    expected = {"success": False, "error": "Order with id 999 not found", "errors": []}
    assert (get.status, get.body) == (404, expected)
    assert (post.status, post.body) == (404, expected)


async def test_schedule_books_the_pickup_and_moves_the_order(sandbox_at: Sandbox) -> None:
    async with sandbox_at() as (api, _):
        order_id = await _ready_order(api)
        reply = await api.call(
            "POST", f"/orders/{order_id}/schedule_pickups", json=_pickup("06-01-2026")
        )
        order = (await api.call("GET", f"/orders/{order_id}")).body["order"]
    assert reply.status == 201
    pickup = reply.body["scheduled_pickup"]
    assert set(pickup) == {
        "id", "time_from", "time_to", "scheduled_date", "confirmation_number",
        "freight_confirmation_number", "error_message",
    }  # fmt: skip
    assert (pickup["time_from"], pickup["time_to"], pickup["scheduled_date"]) == (
        "10:00",
        "12:00",
        "06-01-2026",
    )
    assert pickup["confirmation_number"]
    assert pickup["freight_confirmation_number"]
    assert pickup["error_message"] is None
    assert order["status"] == "awaiting_pickup"
    assert order["pickup_date"] == "2026-01-06"
    assert order["scheduled_pickup"] == "06-01-2026 10:00-12:00 (America/New_York)"


async def test_hub_pickup_books_only_the_first_leg(sandbox_at: Sandbox) -> None:
    async with sandbox_at() as (api, _):
        order_id = await _ready_order(api, hub=True)
        await api.call("POST", f"/orders/{order_id}/schedule_pickups", json=_pickup("07-01-2026"))
        order = (await api.call("GET", f"/orders/{order_id}")).body["order"]
    statuses = [leg["status"] for leg in order["shipments"]]
    assert statuses == ["awaiting_pickup", "awaiting_schedule_pickup"]


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(_pickup("06-01-2026", "08:00", "10:00"), id="starts-before-earliest"),
        pytest.param(_pickup("06-01-2026", "17:00", "19:00"), id="ends-after-closing"),
        pytest.param(_pickup("06-01-2026", "10:00", "11:59"), id="shorter-than-minimum"),
        pytest.param(_pickup("06-01-2026", "12:00", "10:00"), id="ends-before-start"),
        pytest.param(_pickup("10-01-2026"), id="saturday-not-offered"),
        pytest.param(_pickup("12-01-2026"), id="sixth-business-day"),
        pytest.param(_pickup("02-01-2026"), id="in-the-past"),
        pytest.param(_pickup("06-01-2026", "10:00:00", "12:00"), id="seconds-in-time"),
        pytest.param(_pickup("06-01-2026", "9:00", "12:00"), id="one-digit-hour"),
        pytest.param(_pickup("06-01-2026", "25:00", "26:00"), id="no-such-hour"),
        pytest.param(_pickup("2026-01-06"), id="iso-date"),
        pytest.param(_pickup("31-02-2026"), id="no-such-date"),
        pytest.param(
            {"scheduled_pickup": {"time_from": "10:00", "time_to": "12:00"}}, id="no-date"
        ),
        pytest.param(
            {"scheduled_pickup": {**_pickup("06-01-2026")["scheduled_pickup"], "note": "x"}},
            id="unknown-field",
        ),
        pytest.param(_pickup("06-01-2026")["scheduled_pickup"], id="no-wrapper"),
    ],
)
async def test_invalid_pickup_is_400(sandbox_at: Sandbox, body: dict[str, Any]) -> None:
    async with sandbox_at() as (api, _):
        order_id = await _ready_order(api)
        reply = await api.call("POST", f"/orders/{order_id}/schedule_pickups", json=body)
    assert (reply.status, reply.body) == (400, INVALID)


async def test_window_may_span_the_whole_slot(sandbox_at: Sandbox) -> None:
    async with sandbox_at() as (api, _):
        order_id = await _ready_order(api)
        body = _pickup("06-01-2026", "09:00", "18:00")
        reply = await api.call("POST", f"/orders/{order_id}/schedule_pickups", json=body)
    assert reply.status == 201


# 20:59 UTC = 15:59 in New York, one minute before the cut-off.
BEFORE_CUT_OFF = datetime(2026, 1, 5, 20, 59, tzinfo=UTC)


@pytest.mark.parametrize(
    ("day", "minutes_later", "expected"),
    [
        pytest.param("05-01-2026", 0, 201, id="same-day-before-cut-off"),
        pytest.param("06-01-2026", 0, 201, id="next-day-before-cut-off"),
        pytest.param("05-01-2026", 1, 400, id="same-day-at-cut-off"),
        pytest.param("06-01-2026", 1, 400, id="next-day-at-cut-off"),
        pytest.param("07-01-2026", 1, 201, id="day-after-next-at-cut-off"),
    ],
)
async def test_same_and_next_day_need_the_cut_off(
    sandbox_at: Sandbox, day: str, minutes_later: int, expected: int
) -> None:
    async with sandbox_at(BEFORE_CUT_OFF) as (api, clock):
        order_id = await _ready_order(api)
        clock.advance(60 * minutes_later)
        reply = await api.call(
            "POST", f"/orders/{order_id}/schedule_pickups", json=_pickup(day, "09:00", "17:00")
        )
    assert reply.status == expected


async def test_cut_off_is_read_in_the_origin_time_zone(sandbox_at: Sandbox) -> None:
    # 15:30 UTC: 16:30 in Berlin (past the cut-off) but 10:30 in New York.
    async with sandbox_at(datetime(2026, 1, 5, 15, 30, tzinfo=UTC)) as (api, _):
        quote = await api.quote(origin_country_id=276, destination_country_id=840)
        body = order_body(quote["estimates"][0]["estimate_id"], destination=840)
        order = (await api.call("POST", "/orders", json=body)).body["order"]
        await api.call("POST", f"/orders/{order['id']}/waybills")
        berlin = await api.call(
            "POST", f"/orders/{order['id']}/schedule_pickups", json=_pickup("06-01-2026")
        )
        us_order = await _ready_order(api)
        new_york = await api.call(
            "POST", f"/orders/{us_order}/schedule_pickups", json=_pickup("06-01-2026")
        )
    assert berlin.status == 400
    assert new_york.status == 201


async def test_carrier_rejection_answers_201_with_the_message(sandbox_at: Sandbox) -> None:
    async with sandbox_at() as (api, _):
        order_id = await _ready_order(api)
        api.server.control.add_fault(
            "carrier_rejection", "/orders/*/schedule_pickups", message="No courier on Tuesday"
        )
        rejected = await api.call(
            "POST", f"/orders/{order_id}/schedule_pickups", json=_pickup("06-01-2026")
        )
        order = (await api.call("GET", f"/orders/{order_id}")).body["order"]
        accepted = await api.call(
            "POST", f"/orders/{order_id}/schedule_pickups", json=_pickup("06-01-2026")
        )
    assert rejected.status == 201
    pickup = rejected.body["scheduled_pickup"]
    assert pickup["error_message"] == "No courier on Tuesday"
    assert pickup["confirmation_number"] == ""
    assert pickup["freight_confirmation_number"] == ""
    assert order["status"] == "awaiting_schedule_pickup"
    assert order["scheduled_pickup"] == ""
    assert accepted.body["scheduled_pickup"]["error_message"] is None


async def test_pickup_without_waybill_is_rejected_by_the_carrier(sandbox_at: Sandbox) -> None:
    async with sandbox_at() as (api, _):
        order_id = await _ready_order(api, waybill=False)
        reply = await api.call(
            "POST", f"/orders/{order_id}/schedule_pickups", json=_pickup("06-01-2026")
        )
        order = (await api.call("GET", f"/orders/{order_id}")).body["order"]
    assert reply.status == 201
    assert reply.body["scheduled_pickup"]["error_message"] == NO_WAYBILL
    assert order["status"] == "order_received"


async def test_cancelled_order_offers_nothing_and_refuses_pickups(sandbox_at: Sandbox) -> None:
    async with sandbox_at() as (api, _):
        order_id = await _ready_order(api)
        await api.call("DELETE", f"/orders/{order_id}")
        offered = await api.call("GET", f"/orders/{order_id}/pickup_availabilities")
        reply = await api.call(
            "POST", f"/orders/{order_id}/schedule_pickups", json=_pickup("06-01-2026")
        )
    assert (offered.status, offered.body) == (200, [])
    assert (reply.status, reply.body) == (400, INVALID)
