"""Pickups across the cut-off (rule 4 of spec 4.6, README choice 14) on the sandbox.

The client and the sandbox run on clocks of their own so the client can be behind the
server: then a window the client finds in time is refused, and the job must still book.
Judged by the sandbox's request log and orders.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from shipping_async._client import AsyncShippingClient
from shipping_async.bulk._pickup import PICKUP_ATTEMPTS, book_pickup
from shipping_async.bulk.results import ResultStatus
from shipping_async.bulk.shipper import BulkShipper
from shipping_async.clock import Clock, ManualClock, ScaledClock
from shipping_async.errors import BadRequestError, NoPickupWindowError
from shipping_async.limiter import RollingWindowLimiter
from shipping_async.models import PickupWish, SchedulePickupRequest, choose_pickup_window
from shipping_async.sandbox import SandboxServer
from tests.bulk.support import make_job, make_jobs

NEW_YORK = ZoneInfo("America/New_York")  # the US origin of make_job; cut-off 16:00 there
MONDAY = date(2026, 1, 5)
TUESDAY = MONDAY + timedelta(days=1)
WEDNESDAY = MONDAY + timedelta(days=2)


def new_york(day: date, at: time) -> datetime:
    return datetime.combine(day, at, tzinfo=NEW_YORK).astimezone(UTC)


def client_on(sandbox: SandboxServer, clock: Clock) -> AsyncShippingClient:
    limiter = RollingWindowLimiter(20, 60.0, clock=clock)
    return AsyncShippingClient(
        sandbox.token, base_url=sandbox.base_url, order_limiter=limiter, clock=clock
    )


async def waybilled_order(client: AsyncShippingClient) -> int:
    job = make_job("PO-CUT")
    quote = await client.quotes.create(job.quote)
    order = await client.orders.create(job.order.to_request(quote.valid_estimates()[0].estimate_id))
    await client.orders.create_waybill(order.id)
    return order.id


def pickup_posts(sandbox: SandboxServer) -> list[int | None]:
    return [
        record.status
        for record in sandbox.control.requests(method="POST")
        if record.path.endswith("/schedule_pickups")
    ]


def booked_dates(sandbox: SandboxServer) -> list[Any]:
    return [order["pickup_date"] for order in sandbox.control.orders()]


async def nothing() -> None:
    return None


@pytest.mark.parametrize(
    ("server_at", "client_behind", "posts", "booked"),
    [
        (time(15, 54), timedelta(0), [201], MONDAY),  # just before the cut-off and margin
        (time(16, 0), timedelta(0), [201], WEDNESDAY),  # at the cut-off
        (time(16, 30), timedelta(0), [201], WEDNESDAY),  # after it
        # The client thinks 15:50, the server says 16:01: today and tomorrow are
        # refused, then the availabilities are read again and Wednesday is booked.
        (time(16, 1), timedelta(minutes=11), [400, 400, 201], WEDNESDAY),
    ],
)
async def test_a_pickup_requested_around_the_cut_off_is_booked(
    server_at: time, client_behind: timedelta, posts: list[int], booked: date
) -> None:
    server_clock = ManualClock(wall_origin=new_york(MONDAY, server_at))
    client_clock = ManualClock(wall_origin=new_york(MONDAY, server_at) - client_behind)
    async with (
        SandboxServer(clock=server_clock, seed=4) as sandbox,
        client_on(sandbox, client_clock) as client,
    ):
        order_id = await waybilled_order(client)
        window, answer = await book_pickup(
            client.orders, order_id, PickupWish(), client_clock, nothing
        )

    assert pickup_posts(sandbox) == posts
    assert not answer.rejected
    assert window.request.scheduled_date == booked
    assert booked_dates(sandbox) == [booked.isoformat()]
    assert [order["status"] for order in sandbox.control.orders()] == ["awaiting_pickup"]


async def test_refusals_for_another_reason_end_after_the_bound() -> None:
    clock = ManualClock(wall_origin=new_york(MONDAY, time(9, 0)))
    async with SandboxServer(clock=clock, seed=5) as sandbox:
        sandbox.control.add_fault(
            "status", "/orders/*/schedule_pickups", method="POST", status=400, count=99
        )
        async with client_on(sandbox, clock) as client:
            order_id = await waybilled_order(client)
            with pytest.raises(BadRequestError):
                await book_pickup(client.orders, order_id, PickupWish(), clock, nothing)

    assert pickup_posts(sandbox) == [400] * PICKUP_ATTEMPTS


@pytest.mark.parametrize(
    "at",
    [
        time(15, 59, 59),
        time(16, 0),
        time(16, 0, 1),
        time(23, 59, 59),
        time(0, 0),
    ],
)
async def test_the_sandbox_refuses_exactly_the_dates_the_chooser_passes_over(at: time) -> None:
    # With no margin the chooser's rule and the sandbox's must agree date by date.
    day = TUESDAY if at == time(0, 0) else MONDAY
    clock = ManualClock(wall_origin=new_york(day, at))
    async with (
        SandboxServer(clock=clock, seed=6) as sandbox,
        client_on(sandbox, clock) as client,
    ):
        order_id = await waybilled_order(client)
        slots = await client.orders.pickup_availabilities(order_id)
        for offered in slots:
            try:
                chosen = choose_pickup_window([offered], now=clock.now(), margin=timedelta(0))
            except NoPickupWindowError:
                chosen = None
            request = (
                chosen.request
                if chosen is not None
                else SchedulePickupRequest(
                    scheduled_date=offered.pickup_date, time_from=time(16), time_to=time(18)
                )
            )
            try:
                await client.orders.schedule_pickup(order_id, request)
                accepted = True
            except BadRequestError:
                accepted = False
            assert accepted == (chosen is not None), (at, offered.pickup_date)


class _Shifted:
    """A scaled clock whose wall reading starts at ``start`` (the same monotonic time)."""

    def __init__(self, inner: ScaledClock, start: datetime) -> None:
        self._inner = inner
        self._shift = start - inner.now()

    def monotonic(self) -> float:
        return self._inner.monotonic()

    def now(self) -> datetime:
        return self._inner.now() + self._shift

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)

    def from_real(self, seconds: float) -> float:
        return self._inner.from_real(seconds)


async def test_a_bulk_run_crossing_the_cut_off_finishes_every_job() -> None:
    # The sandbox starts at 15:59 in New York; the 21st order waits a 60 s window, so
    # later jobs book after the cut-off. The client's clock is 30 minutes behind (far
    # beyond the margin): it picks today and is refused until it chooses again.
    scaled = ScaledClock(speed=100)
    server_clock = _Shifted(scaled, new_york(MONDAY, time(15, 59)))
    client_clock = _Shifted(scaled, new_york(MONDAY, time(15, 29)))
    async with (
        SandboxServer(clock=server_clock, seed=7) as sandbox,
        client_on(sandbox, client_clock) as client,
    ):
        results = [result async for result in BulkShipper(client).run(make_jobs(30))]

    assert Counter(r.status for r in results) == {ResultStatus.DONE: 30}
    orders = sandbox.control.orders()
    assert len(orders) == 30
    assert {order["status"] for order in orders} == {"awaiting_pickup"}
    posts = Counter(pickup_posts(sandbox))
    assert posts[201] == 30
    assert posts[400] >= 2  # today and tomorrow were refused at least once
    dates = Counter(order["pickup_date"] for order in orders)
    assert set(dates) <= {MONDAY.isoformat(), WEDNESDAY.isoformat()}
    assert dates[WEDNESDAY.isoformat()] >= 10
