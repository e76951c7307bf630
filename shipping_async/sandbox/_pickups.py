"""Pickups: availabilities for the next business days and the scheduling rules of spec 4.6.

Slots are in the origin country's time zone. Each business day (Mon-Fri, from today)
offers one slot from ``earliest_pickup_time`` to a closing time (config, 18:00 by default;
the spec does not show one). Rule 4 as read here: for a pickup on date D with local now N,
when D is N's date or the next calendar day the request must arrive while N's time is
before ``cut_off_time``.
"""

from __future__ import annotations

import re
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import msgspec
from aiohttp import web

from shipping_async.sandbox._core import SANDBOX_KEY, Sandbox, api_path
from shipping_async.sandbox._pricing import carrier_code
from shipping_async.sandbox._schemas import ScheduledPickupRequest
from shipping_async.sandbox._state import PRE_PICKUP_STATUSES, Order, ScheduledPickup
from shipping_async.sandbox._wire import (
    InvalidInput,
    error_response,
    json_response,
    read_json,
    scheduled_pickup_wire,
)
from shipping_async.sandbox.countries import COUNTRIES

__all__ = ["NO_WAYBILL", "availabilities", "offered_dates", "routes"]

NO_WAYBILL = "No waybill has been generated for this shipment: create the waybill first"
_decoder = msgspec.json.Decoder(ScheduledPickupRequest)
_HHMM = re.compile(r"^\d{2}:\d{2}$")
_DDMMYYYY = re.compile(r"^\d{2}-\d{2}-\d{4}$")


def _zone(order: Order) -> ZoneInfo:
    # The lane's origin, even on a hub order: the pickup is the first leg's (spec 4.5).
    return ZoneInfo(COUNTRIES[order.quote.origin_country_id].time_zone_id)


def _local_now(sandbox: Sandbox, zone: ZoneInfo) -> datetime:
    return sandbox.clock.now().astimezone(zone)


def offered_dates(sandbox: Sandbox, zone: ZoneInfo) -> list[date]:
    """The next business days (Mon-Fri) from today in ``zone``, today included."""
    day = _local_now(sandbox, zone).date()
    days: list[date] = []
    while len(days) < sandbox.config.pickup_business_days:
        if day.weekday() < 5:
            days.append(day)
        day += timedelta(days=1)
    return days


def availabilities(sandbox: Sandbox, order: Order) -> list[dict[str, Any]]:
    """The availabilities of spec 2.7; none for a cancelled order or one gone live."""
    if order.status not in PRE_PICKUP_STATUSES:
        return []
    config = sandbox.config
    zone = _zone(order)
    return [
        {
            "pickup_date": day.strftime("%d-%m-%Y"),
            "cut_off_time": f"{config.pickup_cut_off}.00",
            "minimum_access_duration_minutes": config.pickup_minimum_minutes,
            "earliest_pickup_time": f"{config.pickup_earliest}.00",
            "time_zone_id": zone.key,
        }
        for day in offered_dates(sandbox, zone)
    ]


def _clock_time(text: str, field: str) -> time:
    try:
        if not _HHMM.match(text):
            raise ValueError(text)
        return time.fromisoformat(text)
    except ValueError:
        raise InvalidInput(f"scheduled_pickup.{field}: {text!r} is not HH:MM") from None


def _day(text: str) -> date:
    try:
        if not _DDMMYYYY.match(text):
            raise ValueError(text)
        return datetime.strptime(text, "%d-%m-%Y").date()
    except ValueError:
        raise InvalidInput(f"scheduled_date: {text!r} is not DD-MM-YYYY") from None


def _minutes(moment: time) -> int:
    return moment.hour * 60 + moment.minute


def _check(sandbox: Sandbox, order: Order, start: time, end: time, day: date) -> None:
    config = sandbox.config
    if order.status not in PRE_PICKUP_STATUSES:
        raise InvalidInput(f"order {order.id} is {order.status}: no pickup can be scheduled")
    zone = _zone(order)
    now = _local_now(sandbox, zone)
    if day < now.date():
        raise InvalidInput(f"scheduled_date {day:%d-%m-%Y} is in the past ({zone.key})")
    if day not in offered_dates(sandbox, zone):
        raise InvalidInput(f"scheduled_date {day:%d-%m-%Y} is not an offered availability")
    earliest = time.fromisoformat(config.pickup_earliest)
    closing = time.fromisoformat(config.pickup_closing)
    if not earliest <= start < end <= closing:
        raise InvalidInput(
            f"window must lie within the slot {config.pickup_earliest}-{config.pickup_closing}"
        )
    if _minutes(end) - _minutes(start) < config.pickup_minimum_minutes:
        raise InvalidInput(f"window shorter than {config.pickup_minimum_minutes} minutes")
    cut_off = time.fromisoformat(config.pickup_cut_off)
    if day in (now.date(), now.date() + timedelta(days=1)) and now.time() >= cut_off:
        raise InvalidInput(
            f"same-day or next-day pickup must be requested before {config.pickup_cut_off} "
            f"({zone.key}); it is {now:%H:%M} there"
        )


def _order(sandbox: Sandbox, request: web.Request) -> Order | web.Response:
    order_id = int(request.match_info["id"])
    order = sandbox.store.orders.get(order_id)
    if order is None:
        return error_response(404, f"Order with id {order_id} not found")
    return order


async def get_availabilities(request: web.Request) -> web.Response:
    """GET /orders/{id}/pickup_availabilities: a JSON array (spec 4.5)."""
    sandbox = request.app[SANDBOX_KEY]
    order = _order(sandbox, request)
    if isinstance(order, web.Response):
        return order
    return json_response(availabilities(sandbox, order))


async def schedule_pickup(request: web.Request) -> web.Response:
    """POST /orders/{id}/schedule_pickups: 201 with the scheduled pickup (spec 4.6)."""
    sandbox = request.app[SANDBOX_KEY]
    order = _order(sandbox, request)
    if isinstance(order, web.Response):
        return order
    body = (await read_json(request, _decoder)).scheduled_pickup
    start = _clock_time(body.time_from, "time_from")
    end = _clock_time(body.time_to, "time_to")
    day = _day(body.scheduled_date)
    _check(sandbox, order, start, end, day)
    store = sandbox.store
    first = order.legs[0]  # on a hub order only the leg leaving the origin is booked
    fault = sandbox.faults.take(request.method, api_path(request), carrier=True)
    rejection = fault.message if fault is not None else (None if first.waybill else NO_WAYBILL)
    pickup = ScheduledPickup(
        id=store.next_id("pickup"),
        order_id=order.id,
        time_from=body.time_from,
        time_to=body.time_to,
        scheduled_date=body.scheduled_date,
        confirmation_number="" if rejection else "PU" + store.digits(8),
        freight_confirmation_number=(
            "" if rejection else carrier_code(first.carrier) + store.digits(9)
        ),
        error_message=rejection,
    )
    store.pickups[pickup.id] = pickup
    if rejection is None:
        sandbox.set_leg_status(order, 0, "awaiting_pickup")
        order.pickup_date = day
        order.scheduled_pickup = (
            f"{body.scheduled_date} {body.time_from}-{body.time_to} ({_zone(order).key})"
        )
    return json_response({"scheduled_pickup": scheduled_pickup_wire(pickup)}, 201)


def routes(prefix: str) -> list[web.RouteDef]:
    """The pickup routes under ``prefix``."""
    return [
        web.get(prefix + "/orders/{id:\\d+}/pickup_availabilities", get_availabilities),
        web.post(prefix + "/orders/{id:\\d+}/schedule_pickups", schedule_pickup),
    ]
