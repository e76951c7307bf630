"""Pickup availabilities, scheduled pickups, and choosing a window that obeys the rules."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import msgspec

from shipping_async.errors import NoPickupWindowError, RequestValidationError
from shipping_async.models._base import (
    MAX_YEAR,
    MIN_YEAR,
    ClockTime,
    DayMonthYear,
    HourMinute,
    Model,
    passed_as_made,
)

__all__ = [
    "PickupAvailability",
    "PickupWindow",
    "PickupWish",
    "SchedulePickupRequest",
    "ScheduledPickup",
    "choose_pickup_window",
]


class PickupAvailability(Model):
    """A date on which the carrier can pick up, and until when it can be booked.

    Every time is in ``time_zone_id`` (see :attr:`time_zone`).
    """

    pickup_date: DayMonthYear
    cut_off_time: ClockTime
    earliest_pickup_time: ClockTime
    minimum_access_duration_minutes: int
    time_zone_id: str

    @property
    def time_zone(self) -> ZoneInfo:
        return ZoneInfo(self.time_zone_id)


class ScheduledPickup(Model):
    """A booked pickup. A carrier rejection is not an HTTP error: see :attr:`rejected`."""

    id: int | None = None
    time_from: HourMinute | None = None
    time_to: HourMinute | None = None
    scheduled_date: DayMonthYear | None = None
    confirmation_number: str | None = None
    freight_confirmation_number: str | None = None
    error_message: str | None = None

    @property
    def rejected(self) -> bool:
        """True when the carrier refused the booking (its text is in ``error_message``)."""
        return bool(self.error_message)


class SchedulePickupRequest(Model):
    """The body of POST /orders/{id}/schedule_pickups, in the availability's time zone."""

    scheduled_date: date
    time_from: time
    time_to: time

    def check(self) -> None:
        # Compared as sent (HH:MM): 10:00:30 to 10:00:45 would go out as 10:00 to 10:00.
        start, end = self.time_from, self.time_to
        if (end.hour, end.minute) <= (start.hour, start.minute):
            raise RequestValidationError("time_to", "must be a later minute than time_from")

    def to_wire(self) -> dict[str, Any]:
        # HourMinute.of(t).wire() and DayMonthYear.of(d).wire(), without making either.
        start, end, day = self.time_from, self.time_to, self.scheduled_date
        return {
            "scheduled_pickup": {
                "time_from": f"{start.hour:02d}:{start.minute:02d}",
                "time_to": f"{end.hour:02d}:{end.minute:02d}",
                "scheduled_date": f"{day.day:02d}-{day.month:02d}-{day.year:04d}",
            }
        }


class PickupWish(msgspec.Struct, kw_only=True, frozen=True):
    """What the shipper would like: dates from ``earliest_date``, a preferred window.

    ``window_start``/``window_end`` are local times in the slot's time zone; ``None``
    means "as early as the carrier allows" and "the minimum duration".
    """

    earliest_date: date | None = None
    window_start: time | None = None
    window_end: time | None = None


class PickupWindow(msgspec.Struct, kw_only=True, frozen=True):
    """A window that obeys rules 2-4 of section 4.6, ready to send."""

    availability: PickupAvailability
    request: SchedulePickupRequest


# The slot's closing time is not in the availability; carriers close at 18:00 local in
# our reading (the sandbox does the same). One place to change it.
SLOT_CLOSING_TIME = time(18, 0)

# How far the server's clock may be from ours (protocol time) without a request the
# chooser deems in time arriving after the cut-off; skews beyond it end in a 400 that the
# caller answers by choosing again (see shipping_async.bulk._pickup).
CLOCK_SKEW_MARGIN = timedelta(minutes=5)


def choose_pickup_window(
    availabilities: list[PickupAvailability],
    wish: PickupWish | None = None,
    *,
    now: datetime,
    closing_time: time = SLOT_CLOSING_TIME,
    margin: timedelta = CLOCK_SKEW_MARGIN,
) -> PickupWindow:
    """The first window, in date order, that obeys the rules and the wish.

    Rules (section 4.6): the window lies inside the slot (from ``earliest_pickup_time``
    to ``closing_time``), lasts at least ``minimum_access_duration_minutes``, and for a
    pickup today or tomorrow (in the slot's time zone) the request is made before the
    ``cut_off_time``. ``now`` is an aware datetime; a date is passed over when the
    rule would refuse it at any moment within ``margin`` of ``now`` (the server's clock
    may be that far from ours, either way; keep it well under the hours from the cut-off
    to midnight). Raises :class:`NoPickupWindowError`
    listing why each date was passed over.
    """
    wish = wish or PickupWish()
    reasons: list[str] = []
    for slot in sorted(availabilities, key=lambda item: item.pickup_date):
        day = date(slot.pickup_date.year, slot.pickup_date.month, slot.pickup_date.day)
        zone = slot.time_zone
        local_now = now.astimezone(zone)
        reason = _refused(slot, day, now, margin, zone, local_now) or _window(
            slot, day, wish, local_now, closing_time
        )
        if isinstance(reason, str):
            reasons.append(f"{day.isoformat()}: {reason}")
            continue
        start, end = reason
        return PickupWindow(availability=slot, request=_request(day, start, end))
    detail = "; ".join(reasons) if reasons else "no availabilities were offered"
    raise NoPickupWindowError(f"no pickup window fits: {detail}", reasons)


def _request(day: date, start: time, end: time) -> SchedulePickupRequest:
    """The window's request. Plainly valid values (a date of the years a request may name,
    naive times to the second, a later end minute: what validate_request would return as
    it is) make a request marked as checked, so that it is not checked again when sent;
    any other is checked in full then, and refused by name."""
    request = SchedulePickupRequest(scheduled_date=day, time_from=start, time_to=end)
    if (
        type(day) is date
        and MIN_YEAR <= day.year <= MAX_YEAR
        and _to_the_second(start)
        and _to_the_second(end)
        and (end.hour, end.minute) > (start.hour, start.minute)
    ):
        return passed_as_made(request)
    return request


def _to_the_second(value: time) -> bool:
    return type(value) is time and value.tzinfo is None and value.microsecond == 0


def _refused(
    slot: PickupAvailability,
    day: date,
    now: datetime,
    margin: timedelta,
    zone: ZoneInfo,
    local_now: datetime,
) -> str | None:
    """Why rule 4 (README choice 14) could refuse ``day`` on a server whose clock is
    within ``margin`` of ``now``; ``None`` when it cannot. ``local_now`` is ``now`` in
    the slot's ``zone``.

    In the slot's zone a request for day D is refused from the cut-off the day before to
    midnight, and from the cut-off on D on (then D is in the past). Those stretches last
    hours, so testing both ends of ``now +- margin`` (and ``now``) finds any overlap.
    """
    cut_off = time(slot.cut_off_time.hour, slot.cut_off_time.minute, slot.cut_off_time.second)
    for moment in (now, now - margin, now + margin):
        local = local_now if moment is now else moment.astimezone(zone)
        if day < local.date():
            return "in the past" if moment is now else "in the past, within the clock margin"
        if day <= local.date() + _ONE_DAY and local.time() >= cut_off:
            skew = "" if moment is now else f" (with a {_minutes(margin)} clock margin)"
            return (
                f"same- or next-day pickup must be booked before the cut-off {cut_off:%H:%M}{skew}"
            )
    return None


_ONE_DAY = timedelta(days=1)


def _minutes(span: timedelta) -> str:
    return f"{span.total_seconds() / 60:g}-minute"


def _window(
    slot: PickupAvailability, day: date, wish: PickupWish, local_now: datetime, closing: time
) -> str | tuple[time, time]:
    """Why the wish does not fit ``slot``, or the (start, end) window to book on it."""
    if wish.earliest_date is not None and day < wish.earliest_date:
        return f"before the earliest wished date {wish.earliest_date.isoformat()}"
    today = local_now.date()
    minimum = timedelta(minutes=slot.minimum_access_duration_minutes)
    earliest = time(slot.earliest_pickup_time.hour, slot.earliest_pickup_time.minute)
    start = max(earliest, wish.window_start or earliest)
    if day == today:
        # A window cannot start in the past; round up to the next whole minute.
        next_minute = (local_now + timedelta(minutes=1)).time().replace(second=0, microsecond=0)
        start = max(start, next_minute)
    start_at = datetime.combine(day, start)
    close_at = datetime.combine(day, closing)
    end_at = start_at + minimum
    if wish.window_end is not None:
        end_at = max(end_at, datetime.combine(day, wish.window_end))
    end_at = min(end_at, close_at)
    if end_at - start_at < minimum:
        return (
            f"no {slot.minimum_access_duration_minutes}-minute window between "
            f"{start:%H:%M} and the {closing:%H:%M} close"
        )
    return start, end_at.time()
