"""client.quotes: requests as sent, both response shapes, and the quote errors."""

from __future__ import annotations

from decimal import Decimal

import pytest
from aioresponses import aioresponses

from shipping_async._client import AsyncShippingClient
from shipping_async._http import USER_AGENT
from shipping_async.errors import (
    AuthenticationError,
    BadRequestError,
    NoHubForRouteError,
    RequestValidationError,
)
from shipping_async.models import Package

from .support import (
    BASE_URL,
    TOKEN,
    address,
    calls,
    direct_quote,
    hub_quote,
    quote_request,
    sent_headers,
    sent_json,
)

QUOTES = BASE_URL + "/quotes"


async def test_create_sends_the_request_fields_at_the_top_level(
    client: AsyncShippingClient, mock: aioresponses
) -> None:
    mock.post(QUOTES, status=201, payload=direct_quote())

    await client.quotes.create(quote_request(origin_address=address(840)))

    assert sent_json(mock, "POST", "/quotes") == {
        "origin_country_id": 840,
        "destination_country_id": 276,
        "is_document": False,
        "is_stackable": True,
        "is_liftgate_required": False,
        "purpose_of_shipment_id": 1,
        "is_shipment_protection_required": False,
        "value_of_goods": "120.10",
        "value_of_goods_currency_id": "USD",
        "mass_unit": "kg",
        "distance_unit": "cm",
        "packages": [{"weight": 2.5, "width": 20.0, "height": 10.0, "length": 30.0}],
        "origin_address": {
            "name": "Ada Lovelace",
            "address_1": "1 Main Street",
            "city": "New York",
            "country_id": 840,
            "postal_code": "10001",
        },
    }


async def test_hub_transit_is_sent_only_when_asked_for(
    client: AsyncShippingClient, mock: aioresponses
) -> None:
    mock.post(QUOTES, status=201, payload=hub_quote())

    await client.quotes.create(quote_request(hub_transit=True))

    assert sent_json(mock, "POST", "/quotes")["hub_transit"] is True


async def test_every_request_carries_auth_json_and_user_agent_headers(
    client: AsyncShippingClient, mock: aioresponses
) -> None:
    mock.post(QUOTES, status=201, payload=direct_quote())

    await client.quotes.create(quote_request())

    assert sent_headers(mock, "POST", "/quotes") == {
        "Authorization": f"Bearer {TOKEN}",
        "Accept": "application/json",
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
    }
    assert USER_AGENT.startswith("shipping-async/")


async def test_create_decodes_the_flat_direct_quote(
    client: AsyncShippingClient, mock: aioresponses
) -> None:
    mock.post(QUOTES, status=201, payload=direct_quote())

    quote = await client.quotes.create(quote_request())

    assert quote.id == 501
    assert quote.hub_transit is False
    assert [e.estimate_id for e in quote.estimates] == [9001, 9002]
    first = quote.estimates[0]
    assert first.total() == Decimal("11.0")  # 10.1 + 0.2 + 0.7, exactly
    assert first.billable_weight is not None
    assert first.billable_weight.metric is not None
    assert first.billable_weight.metric.billable_weight == 3.2
    assert first.billable_weight.imperial is not None
    assert first.billable_weight.imperial.mass_unit == "lb"


async def test_create_decodes_the_wrapped_hub_quote_and_its_weight_spelling(
    client: AsyncShippingClient, mock: aioresponses
) -> None:
    mock.post(QUOTES, status=201, payload=hub_quote())

    quote = await client.quotes.create(quote_request(hub_transit=True))

    assert (quote.id, quote.hub_transit, quote.dirty, quote.errors) == (502, True, False, [])
    weights = quote.estimates[0].billable_weight
    assert weights is not None
    assert weights.metric is not None
    assert weights.metric.volumetric_weight == 3.2


async def test_get_reads_the_quote_by_id(client: AsyncShippingClient, mock: aioresponses) -> None:
    body = direct_quote()
    body["estimates"][1]["quote_expired"] = True
    mock.get(QUOTES + "/501", payload=body)

    quote = await client.quotes.get(501)

    assert [e.estimate_id for e in quote.valid_estimates()] == [9001]
    assert calls(mock, "GET", "/quotes/501") == 1


async def test_no_hub_for_the_lane_raises_no_hub_for_route(
    client: AsyncShippingClient, mock: aioresponses
) -> None:
    mock.post(
        QUOTES,
        status=422,
        payload={
            "success": False,
            "error": '["Hub transit No hub is available for this route."]',
            "errors": [],
        },
    )

    with pytest.raises(NoHubForRouteError) as caught:
        await client.quotes.create(quote_request(hub_transit=True))

    assert caught.value.messages == ["Hub transit No hub is available for this route."]
    assert caught.value.status == 422
    assert calls(mock, "POST", "/quotes") == 1  # a 422 is an answer, not retried


async def test_invalid_input_raises_bad_request_without_a_retry(
    client: AsyncShippingClient, mock: aioresponses
) -> None:
    mock.post(
        QUOTES, status=400, payload={"success": False, "error": "Invalid input, object invalid"}
    )

    with pytest.raises(BadRequestError, match="Invalid input, object invalid") as caught:
        await client.quotes.create(quote_request())

    assert caught.value.error == "Invalid input, object invalid"
    assert calls(mock, "POST", "/quotes") == 1


async def test_a_bad_token_raises_authentication_error(
    client: AsyncShippingClient, mock: aioresponses
) -> None:
    mock.get(
        QUOTES + "/1", status=401, payload={"success": False, "error": "Unauthorized", "errors": []}
    )

    with pytest.raises(AuthenticationError):
        await client.quotes.get(1)


async def test_a_bad_package_is_refused_before_sending_naming_the_field(
    client: AsyncShippingClient, mock: aioresponses
) -> None:
    packages = [Package(weight=1, width=1, height=1, length=1)] * 2
    packages.append(Package(weight=1, width=-4, height=1, length=1))

    with pytest.raises(RequestValidationError) as caught:
        await client.quotes.create(quote_request(packages=packages))

    assert caught.value.field == "packages[2].width"
    assert calls(mock, "POST", "/quotes") == 0


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        pytest.param({"mass_unit": "stone"}, "mass_unit", id="unit"),
        pytest.param(
            {"value_of_goods_currency_id": "usd"}, "value_of_goods_currency_id", id="currency"
        ),
        pytest.param({"packages": []}, "packages", id="no-packages"),
        pytest.param({"value_of_goods": Decimal("-1")}, "value_of_goods", id="negative-value"),
        pytest.param({"origin_country_id": 0}, "origin_country_id", id="country"),
    ],
)
async def test_invalid_quote_requests_name_the_field(
    client: AsyncShippingClient, changes: dict[str, object], field: str
) -> None:
    with pytest.raises(RequestValidationError) as caught:
        await client.quotes.create(quote_request(**changes))

    assert caught.value.field == field


async def test_a_quote_id_must_be_a_positive_integer(client: AsyncShippingClient) -> None:
    with pytest.raises(RequestValidationError, match="quote_id"):
        await client.quotes.get("1/../orders")  # type: ignore[arg-type]
