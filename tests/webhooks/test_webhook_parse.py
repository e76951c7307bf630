"""Tests of parse_event: the documented body decodes, everything else is refused clearly."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shipping_async.models.webhooks import WebhookEvent
from shipping_async.webhooks import (
    DEFAULT_MAX_BODY_SIZE,
    MIN_FRESHNESS_WINDOW,
    WebhookError,
    WebhookPayloadError,
    WebhookTokenError,
    WebhookTooLargeError,
    parse_event,
)

from .support import TOKEN, BodyFactory, event_fields, hostile_bodies, with_raw


def test_documented_body_decodes_to_an_event_with_an_aware_utc_timestamp(
    make_body: BodyFactory,
) -> None:
    event = parse_event(make_body(), TOKEN)

    assert isinstance(event, WebhookEvent)
    assert event.object_type == "order"
    assert event.object_id == 4201
    assert event.event_type == "shipment.updated.status"
    assert (event.original_value, event.updated_value) == ("order_received", "in_transit")
    assert event.updated_at_utc == datetime(2026, 1, 5, 9, 0, 0, 123000, tzinfo=UTC)
    assert event.updated_at_utc.utcoffset() is not None


def test_timestamp_with_an_offset_is_converted_to_utc(make_body: BodyFactory) -> None:
    event = parse_event(make_body(updated_at_utc="2026-01-05T11:00:00.500+02:00"), TOKEN)

    assert event.updated_at_utc == datetime(2026, 1, 5, 9, 0, 0, 500000, tzinfo=UTC)
    assert event.updated_at_utc.tzinfo is UTC


def test_null_original_value_of_a_first_event_is_accepted(make_body: BodyFactory) -> None:
    event = parse_event(make_body(original_value=None, updated_value="order_received"), TOKEN)

    assert event.original_value is None


def test_unknown_fields_are_ignored_so_a_new_api_field_does_not_stop_deliveries() -> None:
    body = msgspec.json.encode(event_fields(leg=1, webhook_id=9))

    assert parse_event(body, TOKEN).object_id == 4201


def test_wrong_token_is_refused_without_naming_either_token(make_body: BodyFactory) -> None:
    with pytest.raises(WebhookTokenError) as caught:
        parse_event(make_body(token="whk_attacker"), TOKEN)

    assert caught.value.http_status == 401
    assert TOKEN not in str(caught.value)
    assert "whk_attacker" not in str(caught.value)


@pytest.mark.parametrize(
    "sent",
    [
        pytest.param("", id="empty"),
        pytest.param(TOKEN[:-1], id="prefix"),
        pytest.param(TOKEN + "x", id="longer"),
        pytest.param(TOKEN.upper(), id="case"),
        pytest.param("wébhook-tökén", id="non-ascii"),
    ],
)
def test_every_other_token_is_refused(make_body: BodyFactory, sent: str) -> None:
    body = json.dumps(event_fields(token=sent)).encode()

    with pytest.raises(WebhookTokenError):
        parse_event(body, TOKEN)


def test_token_with_a_lone_surrogate_escape_is_refused_as_a_bad_body() -> None:
    body = json.dumps(event_fields(token="\ud800")).encode()

    with pytest.raises(WebhookPayloadError):
        parse_event(body, TOKEN)


def test_non_ascii_expected_token_is_compared_not_crashed(make_body: BodyFactory) -> None:
    assert parse_event(make_body(token="jeton-été"), "jeton-été").token == "jeton-été"
    with pytest.raises(WebhookTokenError):
        parse_event(make_body(token="jeton-ete"), "jeton-été")


def test_truncated_json_is_a_payload_error_not_a_token_error(make_body: BodyFactory) -> None:
    with pytest.raises(WebhookPayloadError, match="not valid JSON") as caught:
        parse_event(make_body()[:-5], TOKEN)

    assert caught.value.http_status == 400
    assert caught.value.field == ""


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        pytest.param({"object_id": "4201"}, "$.object_id", id="id-as-string"),
        pytest.param({"object_id": 4201.5}, "$.object_id", id="id-as-float"),
        pytest.param({"event_type": None}, "$.event_type", id="null-event-type"),
        pytest.param({"updated_value": 3}, "$.updated_value", id="value-as-number"),
        pytest.param({"updated_at_utc": "2026-01-05T09:00:00.123"}, "$.updated_at_utc", id="naive"),
        pytest.param({"updated_at_utc": "yesterday"}, "$.updated_at_utc", id="not-a-date"),
        pytest.param({"token": 12345}, "$.token", id="token-as-number"),
    ],
)
def test_wrong_types_name_the_field(overrides: dict[str, object], field: str) -> None:
    body = msgspec.json.encode(event_fields(**overrides))

    with pytest.raises(WebhookPayloadError) as caught:
        parse_event(body, TOKEN)

    assert caught.value.field == field
    assert field in str(caught.value)


@pytest.mark.parametrize(
    "missing",
    ["object_type", "object_id", "event_type", "original_value", "updated_at_utc", "token"],
)
def test_missing_field_is_a_payload_error_naming_it(missing: str) -> None:
    fields = event_fields()
    del fields[missing]

    with pytest.raises(WebhookPayloadError, match=f"`{missing}`"):
        parse_event(msgspec.json.encode(fields), TOKEN)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"[]", id="array"),
        pytest.param(b"null", id="null"),
        pytest.param(b"\xff\xfe{}", id="not-utf8"),
        pytest.param(b"token=" + TOKEN.encode(), id="form-encoded"),
    ],
)
def test_non_object_bodies_are_payload_errors(body: bytes) -> None:
    with pytest.raises(WebhookPayloadError):
        parse_event(body, TOKEN)


def test_body_over_the_limit_is_too_large_even_when_valid(make_body: BodyFactory) -> None:
    body = make_body()

    assert parse_event(body, TOKEN, max_body_size=len(body)).object_id == 4201
    with pytest.raises(WebhookTooLargeError) as caught:
        parse_event(body, TOKEN, max_body_size=len(body) - 1)
    assert caught.value.http_status == 413


def test_ten_megabyte_body_is_refused_by_default() -> None:
    body = b'{"pad":"' + b"x" * 10_000_000 + b'"}'

    with pytest.raises(WebhookTooLargeError) as caught:
        parse_event(body, TOKEN)
    assert caught.value.limit == DEFAULT_MAX_BODY_SIZE == 64 * 1024


def test_empty_expected_token_is_a_programming_error(make_body: BodyFactory) -> None:
    with pytest.raises(ValueError, match="token"):
        parse_event(make_body(token=""), "")


def test_event_repr_hides_the_token(make_body: BodyFactory) -> None:
    assert TOKEN not in repr(parse_event(make_body(), TOKEN))


_OUR_ERRORS = (WebhookPayloadError, WebhookTokenError, WebhookTooLargeError)


@settings(max_examples=400, deadline=None)
@given(body=st.binary(max_size=512))
def test_arbitrary_bytes_raise_only_webhook_errors(body: bytes) -> None:
    try:
        event = parse_event(body, TOKEN, max_body_size=256)
    except _OUR_ERRORS:
        return
    assert event.token == TOKEN


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    replaced=st.dictionaries(
        st.sampled_from(sorted(event_fields())), _json | st.just(TOKEN), max_size=7
    ),
    dropped=st.sets(st.sampled_from(sorted(event_fields()))),
)
def test_mangled_bodies_raise_only_webhook_errors(
    replaced: dict[str, object], dropped: set[str]
) -> None:
    fields = {k: v for k, v in event_fields(**replaced).items() if k not in dropped}
    try:
        event = parse_event(json.dumps(fields).encode(), TOKEN)
    except _OUR_ERRORS:
        return
    assert event.token == TOKEN


@settings(max_examples=300, deadline=None)
@given(sent=st.text(), expected=st.text(min_size=1))
def test_a_token_is_accepted_exactly_when_it_equals_the_webhooks(sent: str, expected: str) -> None:
    body = json.dumps(event_fields(token=sent)).encode()
    try:
        event = parse_event(body, expected)
    except WebhookTokenError:
        assert sent != expected
    else:
        assert sent == expected
        assert event.token == expected


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param(with_raw("updated_value", b"\xff\xfe"), "", id="invalid-utf8-in-a-string"),
        pytest.param(with_raw("token", b"\xc3"), "", id="truncated-utf8-in-the-token"),
        pytest.param(b'{"pad":' + b"[" * 30_000, "", id="30000-nested-arrays"),
        pytest.param(b'{"pad":' + b'{"a":' * 10_000, "", id="nested-objects"),
        pytest.param(
            msgspec.json.encode(event_fields(updated_at_utc="9999-12-31T23:59:59-23:59")),
            "$.updated_at_utc",
            id="timestamp-past-year-9999-in-utc",
        ),
        pytest.param(
            msgspec.json.encode(event_fields(updated_at_utc="0001-01-01T00:00:00+23:59")),
            "$.updated_at_utc",
            id="timestamp-before-year-1-in-utc",
        ),
    ],
)
def testhostile_bodies_are_payload_errors(body: bytes, field: str) -> None:
    with pytest.raises(WebhookPayloadError) as caught:
        parse_event(body, TOKEN)

    assert caught.value.http_status == 400
    assert caught.value.field == field


def test_event_older_than_max_age_is_refused_naming_the_timestamp(make_body: BodyFactory) -> None:
    sent = datetime(2026, 1, 5, 9, 0, 0, 123000, tzinfo=UTC)
    window = timedelta(minutes=5)

    assert parse_event(make_body(), TOKEN, max_age=window, now=sent + window).object_id == 4201
    for now in (sent + window + timedelta(seconds=1), sent - window - timedelta(seconds=1)):
        with pytest.raises(WebhookPayloadError) as caught:
            parse_event(make_body(), TOKEN, max_age=window, now=now)
        assert caught.value.field == "$.updated_at_utc"


def test_freshness_is_checked_after_the_token(make_body: BodyFactory) -> None:
    far_future = datetime(2100, 1, 1, tzinfo=UTC)

    with pytest.raises(WebhookTokenError):
        parse_event(
            make_body(token="whk_forged"), TOKEN, max_age=timedelta(minutes=5), now=far_future
        )


def test_minimum_freshness_window_covers_the_apis_retry_horizon() -> None:
    retries = sum((20, 40, 60, 80))  # section 8

    assert MIN_FRESHNESS_WINDOW.total_seconds() > retries


@settings(max_examples=300, deadline=None)
@given(body=hostile_bodies)
def testhostile_bodies_raise_only_webhook_errors(body: bytes) -> None:
    try:
        event = parse_event(body, TOKEN, max_age=MIN_FRESHNESS_WINDOW)
    except WebhookError:
        return
    assert event.token == TOKEN
