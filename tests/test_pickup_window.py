"""choose_pickup_window: rules 2-4 of section 4.6, the wish, and the reasons when none fits."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shipping_async.errors import NoPickupWindowError, RequestValidationError
from shipping_async.models import (
    PickupAvailability,
    PickupWish,
    _base,
    choose_pickup_window,
    validate_request,
)
from shipping_async.models._base import ClockTime, DayMonthYear, enc_hook, validated_json
from shipping_async.models.pickups import _request

NEW_YORK = ZoneInfo("America/New_York")


def slot(
    day: date,
    *,
    earliest: time = time(9, 0),
    cut_off: time = time(14, 0),
    minutes: int = 120,
    zone: str = "America/New_York",
) -> PickupAvailability:
    return PickupAvailability(
        pickup_date=DayMonthYear.of(day),
        cut_off_time=ClockTime(cut_off.hour, cut_off.minute),
        earliest_pickup_time=ClockTime(earliest.hour, earliest.minute),
        minimum_access_duration_minutes=minutes,
        time_zone_id=zone,
    )


def local(day: date, at: time, zone: ZoneInfo = NEW_YORK) -> datetime:
    return datetime.combine(day, at, tzinfo=zone).astimezone(UTC)


MONDAY = date(2026, 1, 5)
TUESDAY = MONDAY + timedelta(days=1)
WEDNESDAY = MONDAY + timedelta(days=2)


def test_the_window_starts_at_the_earliest_time_and_lasts_the_minimum() -> None:
    chosen = choose_pickup_window([slot(WEDNESDAY)], now=local(MONDAY, time(8, 0)))

    request = chosen.request
    assert request.scheduled_date == WEDNESDAY
    assert (request.time_from, request.time_to) == (time(9, 0), time(11, 0))
    assert request.to_wire()["scheduled_pickup"]["scheduled_date"] == "07-01-2026"


def test_a_same_day_window_is_chosen_before_the_cut_off_and_starts_after_now() -> None:
    chosen = choose_pickup_window([slot(MONDAY)], now=local(MONDAY, time(10, 20, 30)))

    assert chosen.request.scheduled_date == MONDAY
    assert chosen.request.time_from == time(10, 21)
    assert chosen.request.time_to == time(12, 21)


def test_same_and_next_day_are_passed_over_after_the_cut_off() -> None:
    slots = [slot(MONDAY), slot(TUESDAY), slot(WEDNESDAY)]

    chosen = choose_pickup_window(slots, now=local(MONDAY, time(14, 0)))

    assert chosen.request.scheduled_date == WEDNESDAY


def test_the_cut_off_is_read_in_the_slots_time_zone() -> None:
    tokyo = ZoneInfo("Asia/Tokyo")
    # 06:00 UTC is 15:00 in Tokyo: past the 14:00 cut-off there, though not in UTC.
    now = datetime(2026, 1, 5, 6, 0, tzinfo=UTC)
    slots = [slot(TUESDAY, zone="Asia/Tokyo"), slot(WEDNESDAY, zone="Asia/Tokyo")]

    chosen = choose_pickup_window(slots, now=now)

    assert chosen.request.scheduled_date == WEDNESDAY
    assert chosen.availability.time_zone == tokyo


def test_the_window_never_runs_past_the_slots_close() -> None:
    late = slot(WEDNESDAY, earliest=time(16, 30), minutes=120)

    with pytest.raises(NoPickupWindowError) as caught:
        choose_pickup_window([late], now=local(MONDAY, time(8, 0)))

    assert "120-minute" in caught.value.reasons[0]


def test_the_wish_moves_the_window_and_stretches_it() -> None:
    wish = PickupWish(window_start=time(13, 0), window_end=time(17, 0))

    chosen = choose_pickup_window([slot(WEDNESDAY)], wish, now=local(MONDAY, time(8, 0)))

    assert (chosen.request.time_from, chosen.request.time_to) == (time(13, 0), time(17, 0))


def test_a_wished_end_shorter_than_the_minimum_is_lengthened() -> None:
    wish = PickupWish(window_start=time(10, 0), window_end=time(10, 30))

    chosen = choose_pickup_window([slot(WEDNESDAY)], wish, now=local(MONDAY, time(8, 0)))

    assert (chosen.request.time_from, chosen.request.time_to) == (time(10, 0), time(12, 0))


def test_a_wished_start_before_the_earliest_time_is_moved_into_the_slot() -> None:
    wish = PickupWish(window_start=time(6, 0))

    chosen = choose_pickup_window([slot(WEDNESDAY)], wish, now=local(MONDAY, time(8, 0)))

    assert chosen.request.time_from == time(9, 0)


def test_the_earliest_wished_date_is_honoured() -> None:
    wish = PickupWish(earliest_date=WEDNESDAY + timedelta(days=1))
    slots = [slot(WEDNESDAY), slot(WEDNESDAY + timedelta(days=1))]

    chosen = choose_pickup_window(slots, wish, now=local(MONDAY, time(8, 0)))

    assert chosen.request.scheduled_date == WEDNESDAY + timedelta(days=1)


def test_slots_are_tried_in_date_order_whatever_the_input_order() -> None:
    slots = [slot(WEDNESDAY + timedelta(days=1)), slot(WEDNESDAY)]

    chosen = choose_pickup_window(slots, now=local(MONDAY, time(8, 0)))

    assert chosen.request.scheduled_date == WEDNESDAY


def test_when_nothing_fits_every_date_gets_its_reason() -> None:
    slots = [slot(MONDAY - timedelta(days=1)), slot(MONDAY), slot(TUESDAY)]

    with pytest.raises(NoPickupWindowError) as caught:
        choose_pickup_window(slots, now=local(MONDAY, time(15, 0)))

    reasons = caught.value.reasons
    assert len(reasons) == 3
    assert reasons[0].startswith("2026-01-04")
    assert "past" in reasons[0]
    assert "cut-off 14:00" in reasons[1]
    assert "cut-off 14:00" in reasons[2]
    assert "2026-01-06" in str(caught.value)


def test_no_availabilities_at_all_is_said_plainly() -> None:
    with pytest.raises(NoPickupWindowError, match="no availabilities"):
        choose_pickup_window([], now=local(MONDAY, time(8, 0)))


# Rule 4 at the edges, with the default 5-minute clock margin (cut-off 14:00 here).


def test_just_before_the_cut_off_and_its_margin_today_is_chosen() -> None:
    slots = [slot(MONDAY), slot(TUESDAY), slot(WEDNESDAY)]

    chosen = choose_pickup_window(slots, now=local(MONDAY, time(13, 54, 59)))

    assert chosen.request.scheduled_date == MONDAY


def test_inside_the_margin_before_the_cut_off_same_and_next_day_are_passed_over() -> None:
    slots = [slot(MONDAY), slot(TUESDAY), slot(WEDNESDAY)]

    with pytest.raises(NoPickupWindowError) as caught:
        choose_pickup_window(slots[:2], now=local(MONDAY, time(13, 55)))
    chosen = choose_pickup_window(slots, now=local(MONDAY, time(13, 55)))

    assert all("5-minute clock margin" in reason for reason in caught.value.reasons)
    assert chosen.request.scheduled_date == WEDNESDAY


@pytest.mark.parametrize("at", [time(14, 0), time(14, 0, 1), time(23, 50)])
def test_at_and_after_the_cut_off_same_and_next_day_are_passed_over(at: time) -> None:
    slots = [slot(MONDAY), slot(TUESDAY), slot(WEDNESDAY)]

    chosen = choose_pickup_window(slots, now=local(MONDAY, at))

    assert chosen.request.scheduled_date == WEDNESDAY


def test_without_a_margin_the_chooser_goes_to_the_cut_off_exactly() -> None:
    slots = [slot(MONDAY), slot(TUESDAY)]

    before = choose_pickup_window(slots, now=local(MONDAY, time(13, 59)), margin=timedelta(0))

    assert before.request.scheduled_date == MONDAY
    with pytest.raises(NoPickupWindowError):
        choose_pickup_window(slots, now=local(MONDAY, time(14, 0)), margin=timedelta(0))


def test_just_after_midnight_a_server_still_in_yesterday_could_refuse_today() -> None:
    # 00:02 on Tuesday: a server 3 minutes behind is at 23:59 on Monday, after Monday's
    # cut-off, so Tuesday is its "tomorrow"; Wednesday is safe for both.
    slots = [slot(TUESDAY), slot(WEDNESDAY)]

    chosen = choose_pickup_window(slots, now=local(TUESDAY, time(0, 2)))
    exact = choose_pickup_window(slots, now=local(TUESDAY, time(0, 2)), margin=timedelta(0))

    assert chosen.request.scheduled_date == WEDNESDAY
    assert exact.request.scheduled_date == TUESDAY


# -- the window's request, marked as checked when plainly valid ----------------------------


class _Time(time):
    """A time subclass: not plainly a time, so the full check judges it."""


_SECONDS = st.builds(time, st.integers(0, 23), st.integers(0, 59), st.integers(0, 59))
_TIMES = _SECONDS | st.times() | st.times(timezones=st.just(UTC))


@settings(max_examples=500, deadline=None)
@given(
    day=st.dates(min_value=date(1890, 1, 1), max_value=date(2110, 12, 31)) | st.dates(),
    start=_TIMES | st.builds(_Time, st.integers(0, 23)),
    end=_TIMES,
)
def test_a_window_request_marked_as_checked_is_what_validation_returns(
    day: date, start: time, end: time
) -> None:
    request = _request(day, start, end)
    mark = getattr(request, "_valid_json", None)
    try:
        checked = validate_request(request)
    except (RequestValidationError, TypeError):
        assert mark is None  # what would be refused is never marked
        return
    if mark is not None:
        assert checked == request
        assert mark == msgspec.json.encode(checked, enc_hook=enc_hook)
        sent, json = validated_json(request)
        assert sent is request
        assert json == mark


def test_a_chosen_windows_request_is_not_checked_again_when_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    window = choose_pickup_window([slot(WEDNESDAY)], now=local(MONDAY, time(8, 0)))
    monkeypatch.setattr(_base, "_wire_forms", lambda *args: pytest.fail("checked again"))
    sent, _ = validated_json(window.request)
    assert sent is window.request
