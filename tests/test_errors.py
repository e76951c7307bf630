"""The error tree: status table, the 422 texts, the 429 text, and what each error carries."""

from __future__ import annotations

import json

import pytest

from shipping_async.errors import (
    MAX_QUOTED_CHARS,
    APIConnectionError,
    APIError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    InternalServerError,
    NoHubForRouteError,
    NotFoundError,
    OrderAlreadyLiveError,
    OrderOutcomeUnknownError,
    OutcomeUnknownError,
    RateLimitError,
    RequestValidationError,
    ShippingError,
    UnprocessableEntityError,
    error_for_status,
    parse_rate_limit,
)


def body(error: object, errors: object = None) -> bytes:
    payload: dict[str, object] = {"success": False, "error": error}
    if errors is not None:
        payload["errors"] = errors
    return json.dumps(payload).encode()


def build(status: int, raw: bytes, retry_after: float | None = None) -> APIStatusError:
    return error_for_status(status, raw, method="POST", path="/orders", retry_after=retry_after)


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        pytest.param(400, BadRequestError, id="400"),
        pytest.param(401, AuthenticationError, id="401"),
        pytest.param(404, NotFoundError, id="404"),
        pytest.param(422, UnprocessableEntityError, id="422"),
        pytest.param(429, RateLimitError, id="429"),
        pytest.param(500, InternalServerError, id="500"),
        pytest.param(502, InternalServerError, id="502"),
        pytest.param(503, InternalServerError, id="503"),
        pytest.param(409, APIStatusError, id="409-unlisted"),
        pytest.param(302, APIStatusError, id="redirect"),
    ],
)
def test_the_status_picks_the_class(status: int, cls: type[APIStatusError]) -> None:
    error = build(status, body("text", []))
    assert type(error) is cls
    assert error.status == status
    assert (error.method, error.path) == ("POST", "/orders")


def test_the_400_body_has_only_success_and_error() -> None:
    error = build(400, body("Invalid input, object invalid"))
    assert isinstance(error, BadRequestError)
    assert error.error == "Invalid input, object invalid"
    assert error.errors == []
    assert str(error) == "400 on POST /orders: Invalid input, object invalid"


def test_no_hub_is_told_apart_by_its_text() -> None:
    error = build(422, body('["Hub transit No hub is available for this route."]', []))
    assert isinstance(error, NoHubForRouteError)
    assert error.messages == ["Hub transit No hub is available for this route."]


def test_a_live_order_refusal_is_told_apart_by_its_text() -> None:
    text = "Order cannot be cancelled, this shipment has already gone live"
    error = build(422, body(text, []))
    assert isinstance(error, OrderAlreadyLiveError)
    assert error.messages == [text]


def test_a_webhook_422_lists_its_messages() -> None:
    error = build(422, body('["Target url is invalid", "Events foo are not permitted"]', []))
    assert type(error) is UnprocessableEntityError
    assert error.messages == ["Target url is invalid", "Events foo are not permitted"]


def test_an_error_given_as_a_list_is_kept_as_json_text() -> None:
    error = build(422, body(["Target url is invalid"], []))
    assert error.messages == ["Target url is invalid"]


def test_a_body_that_is_not_json_becomes_the_text() -> None:
    error = build(502, b"<html>Bad gateway</html>")
    assert isinstance(error, InternalServerError)
    assert error.error == "<html>Bad gateway</html>"
    assert error.body == b"<html>Bad gateway</html>"


def test_the_message_quotes_the_api_text_escaped_and_cut_and_keeps_it_whole() -> None:
    text = "refused\x1b[2J\nFORGED LINE\u202e" + "z" * 5_000
    error = build(400, body(text, []))

    message = str(error)
    assert message.startswith("400 on POST /orders: refused\\x1b[2J\\nFORGED LINE\\u202ezz")
    escaped = len(text) + 3 + 1 + 5  # \x1b, \n and \u202e as 4, 2 and 6 characters
    assert message.endswith(f"... ({escaped - MAX_QUOTED_CHARS} more characters)")
    assert "\n" not in message
    assert "\x1b" not in message
    assert error.error == text  # the API's own text, whole, for a program to read


def test_a_429_reads_count_limit_and_window() -> None:
    error = build(429, body("Rate limit reached: 20 of 20 in 60 seconds", []), retry_after=12.0)
    assert isinstance(error, RateLimitError)
    assert (error.count, error.limit, error.window) == (20, 20, 60.0)
    assert error.retry_after == 12.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("20 of 20 in 60 seconds", (20, 20, 60.0), id="spec"),
        pytest.param("3 of 3 in 0.6 seconds", (3, 3, 0.6), id="scaled"),
        pytest.param("20/20 per minute", (20, 20, 60.0), id="per-minute"),
        pytest.param("20 out of 20 requests within 1 hour", (20, 20, 3600.0), id="hour"),
        pytest.param("20 of 20 in 500 ms", (20, 20, 0.5), id="milliseconds"),
        pytest.param("20 of 20", (20, 20, None), id="no-window"),
        pytest.param("Too many requests", (None, None, None), id="no-numbers"),
        pytest.param("", (None, None, None), id="empty"),
    ],
)
def test_rate_limit_texts(text: str, expected: tuple[object, object, object]) -> None:
    info = parse_rate_limit(text)
    assert (info.count, info.limit, info.window) == expected


def test_a_request_validation_error_names_the_field() -> None:
    error = RequestValidationError("packages[2].width", "Expected `float` > 0.0")
    assert error.field == "packages[2].width"
    assert str(error) == "packages[2].width: Expected `float` > 0.0"
    assert isinstance(error, ValueError)


def test_unknown_outcomes_carry_what_to_look_for() -> None:
    order = OrderOutcomeUnknownError("m", method="POST", path="/orders", customer_reference="PO-1")
    assert (order.customer_reference, order.operation) == ("PO-1", "create_order")
    other = OutcomeUnknownError("m", method="POST", path="/webhooks", operation="create_webhook")
    assert other.operation == "create_webhook"


def test_the_tree_has_one_root_and_timeouts_are_timeouts() -> None:
    for cls in (
        RequestValidationError,
        APIError,
        APIStatusError,
        APIConnectionError,
        APITimeoutError,
        OutcomeUnknownError,
        RateLimitError,
        NoHubForRouteError,
    ):
        assert issubclass(cls, ShippingError)
    assert issubclass(APITimeoutError, TimeoutError)
    assert issubclass(APITimeoutError, APIConnectionError)
    assert issubclass(OrderOutcomeUnknownError, OutcomeUnknownError)
    assert not issubclass(OutcomeUnknownError, APIConnectionError)
