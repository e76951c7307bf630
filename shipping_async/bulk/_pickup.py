"""Booking a job's pickup: choose a window, and choose again when the server refuses it.

The chooser keeps a clock margin from the cut-off (rule 4 of spec 4.6, README choice 14),
but a server whose clock is further ahead, or a request that waits long enough in
between, still gets a 400 after the cut-off. A 400 books nothing, so the date is given
up and the availabilities are read again and a window chosen with the time of then:
after a cut-off refusal of today, tomorrow can be refused too, hence more than one
retry, and a bound, since a 400 for another reason would repeat.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Protocol

import msgspec

from shipping_async.clock import Clock
from shipping_async.errors import BadRequestError
from shipping_async.models import (
    PickupAvailability,
    PickupWindow,
    PickupWish,
    ScheduledPickup,
    SchedulePickupRequest,
    choose_pickup_window,
)

__all__ = ["PICKUP_ATTEMPTS", "book_pickup"]

#: Bookings tried per job: today and tomorrow can both be refused after the cut-off.
PICKUP_ATTEMPTS = 4


class _Pickups(Protocol):
    async def pickup_availabilities(self, order_id: int, /) -> list[PickupAvailability]: ...
    async def schedule_pickup(
        self, order_id: int, request: SchedulePickupRequest, /
    ) -> ScheduledPickup: ...


async def book_pickup(
    orders: _Pickups,
    order_id: int,
    wish: PickupWish,
    clock: Clock,
    hold: Callable[[], Awaitable[None]],
) -> tuple[PickupWindow, ScheduledPickup]:
    """The window booked and the server's answer (a carrier rejection included).

    ``hold`` runs before every booking (a stale task must not book). Raises the last
    :class:`BadRequestError` after :data:`PICKUP_ATTEMPTS` refusals, and whatever the
    client or :func:`choose_pickup_window` raises.
    """
    for attempt in range(1, PICKUP_ATTEMPTS + 1):
        slots = await orders.pickup_availabilities(order_id)
        window = choose_pickup_window(slots, wish, now=clock.now())
        await hold()
        try:
            return window, await orders.schedule_pickup(order_id, window.request)
        except BadRequestError:
            if attempt == PICKUP_ATTEMPTS:
                raise
        later = window.request.scheduled_date + timedelta(days=1)
        wish = msgspec.structs.replace(wish, earliest_date=later)
    raise AssertionError("unreachable")  # pragma: no cover
