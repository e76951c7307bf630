"""Requests take their wire forms, and client-side validation raises only the documented errors.

Where the spec's wire type is text and the model holds a richer type (decimal text,
``DD-MM-YYYY``, ``HH:MM``), the request takes either. The property: a request built from
arbitrary values either passes validation, and then its wire-typed values fit the OpenAPI
document's patterns, or raises ``RequestValidationError`` naming a field of the request; the
only other error is the documented ``TypeError`` for an object msgspec cannot encode at all.
"""

from __future__ import annotations

import json
import re
import types
import typing
from datetime import date, time
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema_rs
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shipping_async.bulk.jobs import ShipmentJob
from shipping_async.bulk.readers import read_jobs
from shipping_async.errors import RequestValidationError
from shipping_async.models import (
    OrderRequest,
    Package,
    QuoteRequest,
    SchedulePickupRequest,
    WebhookRequest,
    _base,
    validate_request,
)
from shipping_async.models._base import enc_hook, validated_json

from .support import order_request, quote_request


def _document() -> dict[str, Any]:
    text = resources.files("shipping_async.sandbox").joinpath("openapi.json").read_text()
    document: dict[str, Any] = json.loads(text)
    return document


DOCUMENT = _document()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _schema(name: str) -> Any:
    return jsonschema_rs.validator_for({**DOCUMENT, "$ref": f"#/components/schemas/{name}"})


_SCHEMAS = DOCUMENT["components"]["schemas"]
DECIMAL_TEXT = re.compile(_SCHEMAS["QuoteRequest"]["properties"]["value_of_goods"]["pattern"])
COST_TEXT = re.compile(_SCHEMAS["HsCode"]["properties"]["cost"]["pattern"])
PICKUP = _schema("ScheduledPickupRequest")


def _wire_values_fit_the_document(request: Any) -> None:
    """The wire-typed values of a request that passed fit the document's patterns.

    Only these: the SDK leaves some checks to the server on purpose (a webhook's URL
    scheme and event names, answered 422, so new names need no SDK release).
    """
    body = json.loads(msgspec.json.encode(request, enc_hook=enc_hook))
    if isinstance(request, QuoteRequest):
        assert DECIMAL_TEXT.search(body["value_of_goods"]), body
    elif isinstance(request, OrderRequest):
        for code in body.get("hs_codes") or []:
            assert COST_TEXT.search(code["cost"]), body
    elif isinstance(request, SchedulePickupRequest):
        wire = request.to_wire()
        assert [error.message for error in PICKUP.iter_errors(wire)] == [], wire


REQUESTS = (QuoteRequest, OrderRequest, SchedulePickupRequest, WebhookRequest)


# -- wire forms ---------------------------------------------------------------------------


def test_a_quote_takes_its_value_as_decimal_text() -> None:
    checked = validate_request(quote_request(value_of_goods="100.00"))
    assert checked.value_of_goods == Decimal("100.00")


@pytest.mark.parametrize(
    ("value", "sent"),
    [
        pytest.param(Decimal("1E+5"), "100000", id="exponent"),
        pytest.param(Decimal("120.50"), "120.50", id="decimal"),
        pytest.param(7, "7", id="int"),
        pytest.param("0.5", "0.5", id="text"),
    ],
)
def test_a_value_of_goods_is_sent_as_the_specs_decimal_text(value: Any, sent: str) -> None:
    body = json.loads(msgspec.json.encode(validate_request(quote_request(value_of_goods=value))))
    assert body["value_of_goods"] == sent


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("100,00", id="comma"),
        pytest.param("NaN", id="nan-text"),
        pytest.param(Decimal("-1"), id="negative"),
        pytest.param(Decimal("Infinity"), id="infinite"),
        pytest.param("1e400", id="huge"),
        pytest.param(True, id="bool"),
        pytest.param([1], id="list"),
    ],
)
def test_a_value_of_goods_that_is_no_decimal_text_is_refused_by_name(value: Any) -> None:
    with pytest.raises(RequestValidationError) as caught:
        validate_request(quote_request(value_of_goods=value))
    assert caught.value.field == "value_of_goods"


def test_a_pickup_takes_its_date_and_times_in_wire_form() -> None:
    request = SchedulePickupRequest(
        scheduled_date="07-01-2026",  # type: ignore[arg-type]
        time_from="10:00",  # type: ignore[arg-type]
        time_to="12:30",  # type: ignore[arg-type]
    )
    checked = validate_request(request)
    assert (checked.scheduled_date, checked.time_from, checked.time_to) == (
        date(2026, 1, 7),
        time(10),
        time(12, 30),
    )
    wire = checked.to_wire()["scheduled_pickup"]
    assert wire == {"time_from": "10:00", "time_to": "12:30", "scheduled_date": "07-01-2026"}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("scheduled_date", "31-02-2026", id="no-such-day"),
        pytest.param("scheduled_date", "2026/01/07", id="slashes"),
        pytest.param("time_from", "25:00", id="hour-25"),
        pytest.param("time_to", "noon", id="words"),
        pytest.param("scheduled_date", date(1, 1, 1), id="year-1"),
        pytest.param("time_to", time(10, 0, 30), id="same-minute-as-sent"),
    ],
)
def test_a_pickup_value_in_no_known_form_is_refused_by_name(field: str, value: Any) -> None:
    values: dict[str, Any] = {
        "scheduled_date": date(2026, 1, 7),
        "time_from": time(10),
        "time_to": time(12),
    }
    values[field] = value
    with pytest.raises(RequestValidationError) as caught:
        validate_request(SchedulePickupRequest(**values))
    assert caught.value.field == field


def test_an_hs_code_cost_takes_decimal_text() -> None:
    request = order_request()
    assert request.hs_codes is not None
    request.hs_codes[0].cost = "12.30"  # type: ignore[assignment]
    checked = validate_request(request)
    assert checked.hs_codes is not None
    assert checked.hs_codes[0].cost == Decimal("12.30")


# -- the property -------------------------------------------------------------------------

ANYTHING = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=12),
    st.decimals(),
    st.dates(),
    st.times(),
    st.datetimes(),
    st.binary(max_size=4),
    st.builds(object),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.from_regex(r"\A[0-9]{1,4}(\.[0-9]{1,3})?\Z"),
    st.from_regex(r"\A[0-3][0-9]-[01][0-9]-[0-9]{4}\Z"),
    st.from_regex(r"\A[0-2][0-9]:[0-6][0-9]\Z"),
)


def _valid(type_: Any) -> st.SearchStrategy[Any]:
    """Plausible values of ``type_`` (constraints may still be broken)."""
    origin, args = typing.get_origin(type_), typing.get_args(type_)
    if origin is typing.Annotated:
        return _valid(args[0])
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(_valid(arg) for arg in args))
    if origin is typing.Literal:
        return st.sampled_from(args)
    if origin is list:
        return st.lists(_field(args[0]), min_size=1, max_size=3)
    if type_ is type(None):
        return st.none()
    if isinstance(type_, type) and issubclass(type_, msgspec.Struct):
        fields = {f.name: _field(f.type) for f in msgspec.structs.fields(type_)}
        return st.fixed_dictionaries(fields).map(lambda kwargs: type_(**kwargs))
    simple: dict[Any, st.SearchStrategy[Any]] = {
        bool: st.booleans(),
        int: st.integers(1, 999),
        float: st.floats(0.1, 1000),
        str: st.text(min_size=1, max_size=8),
        Decimal: st.decimals(0, 10**6, places=2),
        date: st.dates(),
        time: st.times(),
    }
    return simple[type_]


def _field(type_: Any) -> st.SearchStrategy[Any]:
    return st.one_of(_valid(type_), ANYTHING)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=st.one_of(*(_valid(cls) for cls in REQUESTS)))
def test_validation_raises_only_the_documented_errors_and_passes_only_wire_valid_bodies(
    request: Any,
) -> None:
    outcome: Any
    try:
        outcome = validate_request(request)
    except (RequestValidationError, TypeError) as exc:  # anything else fails the test
        outcome = exc
    if isinstance(outcome, RequestValidationError):
        names = {f.name for f in msgspec.structs.fields(type(request))}
        assert outcome.problems
        for field, _ in outcome.problems:
            assert field.split(".")[0].split("[")[0] in names, outcome.problems
    elif isinstance(outcome, TypeError):  # an object msgspec cannot encode at all
        assert "unsupported" in str(outcome).lower(), outcome
    else:
        _wire_values_fit_the_document(outcome)


# -- a request checked once ---------------------------------------------------------------


def test_a_request_that_passed_is_not_walked_again_until_it_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    walks: list[Any] = []
    wire_forms = _base._wire_forms
    monkeypatch.setattr(_base, "_wire_forms", lambda *args: walks.append(args) or wire_forms(*args))
    request = validate_request(quote_request())  # as a batch's reader checks its input
    assert len(walks) == 1

    checked, sent = validated_json(request)
    assert checked is request
    assert sent == msgspec.json.encode(request, enc_hook=enc_hook)
    assert len(walks) == 1

    request.value_of_goods = Decimal("-1")  # changed since: checked in full, refused
    with pytest.raises(RequestValidationError) as caught:
        validated_json(request)
    assert caught.value.field == "value_of_goods"
    assert len(walks) == 2


def test_the_request_given_to_validation_is_checked_again_when_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Only what validate_request returns carries the mark: "20" for a float, or text for
    # a decimal, would send other JSON than the checked copy's.
    request = quote_request(packages=[Package(weight=2.5, width=20.0, height=10.0, length=30.0)])
    validate_request(request)
    walks: list[Any] = []
    wire_forms = _base._wire_forms
    monkeypatch.setattr(_base, "_wire_forms", lambda *args: walks.append(args) or wire_forms(*args))
    validated_json(request)
    assert len(walks) == 1


def test_a_request_in_wire_form_sends_its_checked_copy_and_the_copy_is_not_walked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    request = quote_request(value_of_goods="100.00")  # text: not the model's Decimal
    checked, sent = validated_json(request)
    assert checked is not request
    assert checked.value_of_goods == Decimal("100.00")
    assert sent == msgspec.json.encode(checked, enc_hook=enc_hook)

    monkeypatch.setattr(_base, "_wire_forms", lambda *args: pytest.fail("walked again"))
    again, sent_again = validated_json(checked)
    assert again is checked
    assert sent_again == sent


def test_the_mark_of_a_request_that_passed_is_neither_sent_nor_shown() -> None:
    request = validate_request(quote_request())
    assert getattr(request, "_valid_json", None) is not None
    assert "_valid_json" not in msgspec.json.encode(request, enc_hook=enc_hook).decode()
    assert "_valid_json" not in repr(request)
    assert request == validate_request(quote_request())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=st.one_of(*(_valid(cls) for cls in REQUESTS)))
def test_a_request_sent_twice_gets_the_verdict_and_json_of_a_full_check(request: Any) -> None:
    def outcome() -> Any:
        try:
            checked, sent = validated_json(request)
        except (RequestValidationError, TypeError) as exc:
            return type(exc), str(exc)
        return sent, msgspec.json.encode(validate_request(checked), enc_hook=enc_hook)

    try:
        expected: Any = msgspec.json.encode(validate_request(request), enc_hook=enc_hook)
    except (RequestValidationError, TypeError) as exc:
        expected = (type(exc), str(exc))
    for _ in range(2):  # the second time, a request that passed carries its mark
        got = outcome()
        if isinstance(expected, bytes):
            assert got == (expected, expected)
        else:
            assert got == expected


def test_a_batch_readers_quote_request_is_sent_without_a_second_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = next(read_jobs(EXAMPLES / "shipments.csv"))
    assert isinstance(job, ShipmentJob)
    monkeypatch.setattr(_base, "_wire_forms", lambda *args: pytest.fail("checked again"))
    checked, sent = validated_json(job.quote)
    assert checked is job.quote
    assert sent == msgspec.json.encode(job.quote, enc_hook=enc_hook)
