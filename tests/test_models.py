"""The models: wire formats converted once, lenient responses, strict requests, decoders."""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from resources.support import direct_quote, estimate, hub_quote, order, quote_request

from shipping_async.errors import RequestValidationError
from shipping_async.models import (
    Estimate,
    LineItem,
    Order,
    Package,
    PickupAvailability,
    Quote,
    ScheduledPickup,
    SchedulePickupRequest,
    _base,
    decoder,
    validate_request,
)
from shipping_async.models._base import ApiTimestamp, ClockTime, DayMonthYear, HourMinute
from shipping_async.models.orders import _OrderEnvelope
from shipping_async.models.quotes import _QuoteEnvelope


def decode_order(body: dict[str, Any]) -> Order:
    envelope: _OrderEnvelope = decoder(_OrderEnvelope).decode(json.dumps({"order": body}))
    return envelope.order


def decode_quote(body: dict[str, Any]) -> Quote:
    envelope: _QuoteEnvelope = decoder(_QuoteEnvelope).decode(json.dumps(body))
    return envelope.unwrap()


def test_one_decoder_per_type_is_made_and_kept() -> None:
    assert decoder(_OrderEnvelope) is decoder(_OrderEnvelope)
    assert decoder(_OrderEnvelope) is not decoder(_QuoteEnvelope)


def test_created_at_becomes_an_aware_utc_datetime() -> None:
    created = decode_order(order()).created_at
    assert created == datetime(2026, 1, 5, 9, 30, 15, tzinfo=UTC)
    assert created is not None
    assert created.utcoffset() is not None


def test_a_malformed_created_at_is_a_validation_error_naming_the_field() -> None:
    with pytest.raises(msgspec.ValidationError, match=r"created_at"):
        decode_order(order(created_at="05-01-2026 09:30"))


def test_nulls_and_unknown_fields_are_accepted() -> None:
    body = order(broker_address=None, invoice_number=None, brand_new_field=[1, 2])
    body["origin_address"]["country"]["new_country_field"] = True
    got = decode_order(body)
    assert got.broker_address is None
    assert got.origin_address is not None
    assert got.origin_address.country is not None


def test_money_is_decimal_and_sums_exactly() -> None:
    quote = decode_quote(direct_quote())
    first = quote.estimates[0]
    assert all(isinstance(item.cost, Decimal) for item in first.line_items)
    assert first.total() == Decimal("11.0")
    assert first.total("USD") == Decimal("11.0")
    assert sum((item.cost for item in first.line_items), Decimal(0)) == Decimal("11.0")


def test_totals_refuse_to_mix_currencies() -> None:
    mixed = Estimate(
        estimate_id=1,
        line_items=[
            LineItem(description="a", cost=Decimal("1.10"), currency_id="USD"),
            LineItem(description="b", cost=Decimal("2.00"), currency_id="EUR"),
        ],
    )
    with pytest.raises(ValueError, match="currencies"):
        mixed.total()
    assert mixed.total("EUR") == Decimal("2.00")


def test_both_weight_spellings_land_in_billable_weight() -> None:
    flat = decode_quote(direct_quote()).estimates[0].billable_weight
    wrapped = decode_quote(hub_quote()).estimates[0].billable_weight
    assert flat == wrapped
    assert flat is not None


def test_the_cheapest_valid_estimate_is_chosen() -> None:
    body = {
        "id": 1,
        "estimates": [
            estimate(1, line_items=[{"description": "x", "cost": 9, "currency_id": "USD"}]),
            estimate(
                2,
                quote_expired=True,
                line_items=[{"description": "x", "cost": 1, "currency_id": "USD"}],
            ),
            estimate(3, line_items=[{"description": "x", "cost": 5, "currency_id": "USD"}]),
        ],
    }
    assert decode_quote(body).cheapest().estimate_id == 3


def test_a_quote_body_with_neither_shape_does_not_decode() -> None:
    with pytest.raises(ValueError, match="neither"):
        decode_quote({"estimates": []})


def test_pickup_formats_become_date_and_time() -> None:
    raw = json.dumps(
        {
            "pickup_date": "31-12-2026",
            "cut_off_time": "16:45.30",
            "minimum_access_duration_minutes": 90,
            "earliest_pickup_time": "08:05.00",
            "time_zone_id": "Asia/Tokyo",
        }
    )
    slot: PickupAvailability = decoder(PickupAvailability).decode(raw)
    assert slot.pickup_date == date(2026, 12, 31)
    assert slot.cut_off_time == time(16, 45, 30)
    assert slot.earliest_pickup_time == time(8, 5)


def test_a_scheduled_pickup_decodes_hh_mm_and_dd_mm_yyyy() -> None:
    raw = b'{"id": 1, "time_from": "09:15", "time_to": "11:15", "scheduled_date": "02-03-2026"}'
    booked: ScheduledPickup = decoder(ScheduledPickup).decode(raw)
    assert (booked.time_from, booked.time_to) == (time(9, 15), time(11, 15))
    assert booked.scheduled_date == date(2026, 3, 2)


@given(st.dates(min_value=date(1000, 1, 1)))
def test_a_day_month_year_date_reads_back_what_it_writes(day: date) -> None:
    assert DayMonthYear.parse(DayMonthYear.of(day).wire()) == day


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("02-03-2026", date(2026, 3, 2), id="padded"),
        pytest.param(" 2-3-2026 ", date(2026, 3, 2), id="unpadded-spaced"),
    ],
)
def test_day_month_year_reads_padded_and_unpadded(text: str, expected: date) -> None:
    assert DayMonthYear.parse(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param("2026-03-02", "expected a date as DD-MM-YYYY", id="iso"),
        pytest.param("02/03/2026", "expected a date as DD-MM-YYYY", id="slashes"),
        pytest.param("02-03-26", "expected a date as DD-MM-YYYY", id="short-year"),
        pytest.param("31-02-2026", "day is out of range", id="no-such-day"),
    ],
)
def test_a_malformed_day_month_year_is_refused(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        DayMonthYear.parse(text)


def test_schedule_pickup_request_writes_the_wire_formats() -> None:
    request = SchedulePickupRequest(
        scheduled_date=date(2026, 3, 2), time_from=time(9, 5), time_to=time(11, 30)
    )
    assert request.to_wire() == {
        "scheduled_pickup": {
            "time_from": "09:05",
            "time_to": "11:30",
            "scheduled_date": "02-03-2026",
        }
    }


def test_validation_names_the_path_of_the_bad_field() -> None:
    packages = [Package(weight=1, width=1, height=1, length=1) for _ in range(3)]
    packages[2].width = -1
    with pytest.raises(RequestValidationError) as caught:
        validate_request(quote_request(packages=packages))
    assert caught.value.field == "packages[2].width"


def test_validation_names_every_problem_not_only_the_first() -> None:
    packages = [Package(weight=1, width=1, height=1, length=1) for _ in range(3)]
    packages[0].width = -1
    packages[2].weight = 0
    request = quote_request(packages=packages, value_of_goods_currency_id="usd")
    request.value_of_goods = Decimal(-5)

    with pytest.raises(RequestValidationError) as caught:
        validate_request(request)

    named = [field for field, _ in caught.value.problems]
    assert sorted(named) == sorted(
        ["packages[0].width", "packages[2].weight", "value_of_goods_currency_id", "value_of_goods"]
    )
    for field in named:
        assert field in str(caught.value)


def test_a_valid_request_passes_unchanged() -> None:
    request = quote_request()
    assert validate_request(request) == request


# -- property: decoders never fail with anything but msgspec's errors ---------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
    | st.sampled_from(["2026/01/05 09:30:15 UTC", "2026/13/45 99:99:99 UTC", "31-02-2026"]),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)


def objects_for(fields: tuple[str, ...]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {}, optional={name: json_values for name in fields} | {"unknown": json_values}
    )


ORDER_FIELDS = tuple(Order.__struct_fields__)
QUOTE_FIELDS = ("quote", *Quote.__struct_fields__)


def decodes_or_refuses(raw: bytes, type_: Any) -> None:
    try:
        result = decoder(type_).decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return
    if isinstance(result, _QuoteEnvelope) and result.quote is None and result.id is None:
        with pytest.raises(ValueError, match="neither"):
            result.unwrap()


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(objects_for(ORDER_FIELDS))
def test_any_json_object_decodes_as_an_order_or_is_refused(body: dict[str, Any]) -> None:
    decodes_or_refuses(json.dumps({"order": body}).encode(), _OrderEnvelope)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(objects_for(QUOTE_FIELDS))
def test_any_json_object_decodes_as_a_quote_or_is_refused(body: dict[str, Any]) -> None:
    decodes_or_refuses(json.dumps(body).encode(), _QuoteEnvelope)


@settings(max_examples=200)
@given(st.lists(objects_for(tuple(PickupAvailability.__struct_fields__)), max_size=3))
def test_any_json_decodes_as_availabilities_or_is_refused(body: list[dict[str, Any]]) -> None:
    decodes_or_refuses(json.dumps(body).encode(), list[PickupAvailability])


# -- request wire forms: the fast ways read as the slow ones ------------------------------


@given(
    st.from_regex(r"[0-9]{0,20}(\.[0-9]{0,15})?", fullmatch=True)
    | st.text(alphabet="0123456789.-+eE ", max_size=20)
    | st.text(max_size=8)
)
def test_decimal_text_reads_plain_text_as_the_decimal_way_does(text: str) -> None:
    def outcome(convert: Any) -> object:
        try:
            return convert(text)
        except ValueError as exc:
            return str(exc)

    assert outcome(_base._decimal_text) == outcome(_base._decimal_number_text)


@pytest.mark.parametrize(
    "convert",
    [pytest.param(_base._wire_date, id="date"), pytest.param(_base._wire_time, id="time")],
)
@given(
    text=st.sampled_from(["2026-01-07", "07-01-2026", "10:00", "10:00.30", "1900-01-01"])
    | st.text(max_size=12)
)
def test_remembered_dates_and_times_read_the_same_every_time(convert: Any, text: str) -> None:
    def outcome() -> object:
        try:
            return convert(text)
        except ValueError as exc:
            return str(exc)

    assert outcome() == outcome() == outcome_of(convert.__wrapped__, text)


def outcome_of(convert: Any, value: object) -> object:
    try:
        return convert(value)
    except ValueError as exc:
        return str(exc)


class _Plain(msgspec.Struct, kw_only=True):
    name: str
    sizes: list[float] = msgspec.field(default_factory=list)


class _Node(msgspec.Struct, kw_only=True):
    when: date | None = None
    plain: _Plain | None = None
    children: list[_Node] | None = None


def test_the_walk_visits_only_what_may_hold_wire_forms_and_follows_a_struct_into_itself() -> None:
    assert _base._walker(_Plain) is None  # nothing there to rewrite
    tree = {"when": "07-01-2026", "children": [{"when": "2026-01-08", "children": [{}]}]}
    assert _base._wire_forms(tree, _Node, "") == []
    assert tree == {"when": "2026-01-07", "children": [{"when": "2026-01-08", "children": [{}]}]}
    bad = {"children": [{}, {"when": "31-02-2026"}]}
    assert [field for field, _ in _base._wire_forms(bad, _Node | None, "")] == ["children[1].when"]


@given(day=st.dates(), start=st.times(), end=st.times())
def test_a_pickup_request_writes_what_its_wire_types_write(
    day: date, start: time, end: time
) -> None:
    request = SchedulePickupRequest(scheduled_date=day, time_from=start, time_to=end)
    assert request.to_wire()["scheduled_pickup"] == {
        "time_from": HourMinute.of(start).wire(),
        "time_to": HourMinute.of(end).wire(),
        "scheduled_date": DayMonthYear.of(day).wire(),
    }


# -- answer wire forms: the quick ways read as the regex ways ------------------------------


def timestamp_by_regex(text: str) -> object:
    """ApiTimestamp.parse as it was: the regex and int() for every text."""
    match = re.fullmatch(
        r"(\d{4})/(\d{1,2})/(\d{1,2}) (\d{1,2}):(\d{1,2}):(\d{1,2}) UTC", text.strip()
    )
    if match is None:
        return ValueError
    try:
        return datetime(*map(int, match.groups()), tzinfo=UTC)
    except ValueError:
        return ValueError


def read(parse: Any, text: str) -> object:
    try:
        return parse(text)
    except ValueError:
        return ValueError


@given(
    st.from_regex(r"[0-9]{4}/[0-9]{2}/[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} UTC", fullmatch=True)
    | st.from_regex(r"\d{4}/\d{1,2}/\d{1,2} \d{1,2}:\d{1,2}:\d{1,2} UTC", fullmatch=True)
    | st.sampled_from(["2026/01/05 24:00:00 UTC", "2026/02/29 10:00:00 UTC", "2026/1/5 9:3:1 UTC"])
)
def test_a_timestamp_reads_as_the_regex_reads_it(text: str) -> None:
    parsed = read(ApiTimestamp.parse, text)
    assert parsed == timestamp_by_regex(text)
    if parsed is not ValueError:
        assert type(parsed) is ApiTimestamp
        assert parsed.tzinfo is UTC


@given(st.from_regex(r"\s?\d{1,3}[-:.]\d{1,3}([-:.]\d{1,5})?\s?", fullmatch=True))
def test_remembered_dates_and_times_of_day_read_the_same_every_time(text: str) -> None:
    for parse in (DayMonthYear.parse, ClockTime.parse, HourMinute.parse):
        first, again = read(parse, text), read(parse, text)
        assert first == again
        if first is not ValueError:
            assert type(first) is type(again) is parse.__self__


@given(
    st.from_regex(r"\s?\d{1,4}[-:./]\d{1,3}([-:./]\d{1,5})?( \d{1,2}:\d{2}:\d{2} UTC)?\s?")
    | st.sampled_from(["07-01-2026", "10:00.30", "10:00", "2026/01/05 09:30:15 UTC"])
)
def test_a_wire_text_decodes_to_what_its_type_parses_every_time(text: str) -> None:
    # The decoder keeps the values of the texts it read; read again, a text gives an
    # equal value of the same type, and a text that does not parse is refused each time.
    for type_ in (DayMonthYear, ClockTime, HourMinute, ApiTimestamp):
        decoder = msgspec.json.Decoder(list[type_], dec_hook=_base.dec_hook)  # type: ignore[valid-type]
        expected = read(type_.parse, text)
        for _ in range(2):
            try:
                (got,) = decoder.decode(msgspec.json.encode([text]))
            except msgspec.ValidationError:
                got = ValueError
            assert got == expected
            assert type(got) is type(expected)


def test_decoded_dates_and_times_are_shared_and_immutable() -> None:
    decoder = msgspec.json.Decoder(list[DayMonthYear], dec_hook=_base.dec_hook)
    first, again = decoder.decode(b'["07-01-2026", "07-01-2026"]')
    assert first is again  # one value for a text read before: it cannot be changed
    with pytest.raises(AttributeError):
        first.note = "mine"  # type: ignore[attr-defined]


def test_the_decoded_values_kept_stay_bounded() -> None:
    decoder = msgspec.json.Decoder(list[ClockTime], dec_hook=_base.dec_hook)
    texts = [
        f"{hour:02d}:{minute:02d}.{second:02d}"
        for hour in range(24)
        for minute in range(60)
        for second in (0, 30)
    ]
    decoder.decode(msgspec.json.encode(texts))
    assert len(_base._DECODED[ClockTime]) <= _base._REMEMBERED
