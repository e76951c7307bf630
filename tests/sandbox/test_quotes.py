"""POST /quotes and GET /quotes/{id}: validation, direct and hub shapes, weights, validity."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import aiohttp
import pytest

from shipping_async.clock import ManualClock
from shipping_async.sandbox import HubLane, SandboxServer
from shipping_async.sandbox._pricing import CURRENCY_RATES_TO_USD

from .support import INVALID, TOKEN, Api, address, quote_body

ESTIMATE_KEYS = {
    "estimate_id", "shipping_company", "shipping_service", "quote_expired", "line_items",
    "billable_weight",
}  # fmt: skip
BREAKDOWN_KEYS = {
    "packages", "mass_unit", "distance_unit", "volumetric_weight", "weight", "billable_weight",
}  # fmt: skip
NO_HUB_BODY = {
    "success": False,
    "error": '["Hub transit No hub is available for this route."]',
    "errors": [],
}


def _without(field: str) -> dict[str, Any]:
    body = quote_body()
    del body[field]
    return body


def _package(**overrides: Any) -> dict[str, Any]:
    return quote_body(
        packages=[{"weight": 2, "width": 20, "height": 10, "length": 30, **overrides}]
    )


INVALID_BODIES = [
    *(pytest.param(_without(field), id=f"missing-{field}") for field in quote_body()),
    pytest.param(quote_body(origin_country_id=999), id="unknown-origin-country"),
    pytest.param(quote_body(destination_country_id=0), id="unknown-destination-country"),
    pytest.param(quote_body(origin_country_id="840"), id="country-id-as-text"),
    pytest.param(quote_body(purpose_of_shipment_id=9), id="unknown-purpose"),
    pytest.param(quote_body(value_of_goods_currency_id="XYZ"), id="unknown-currency"),
    pytest.param(quote_body(value_of_goods_currency_id="usd"), id="lowercase-currency"),
    pytest.param(quote_body(value_of_goods="abc"), id="value-not-decimal"),
    pytest.param(quote_body(value_of_goods="-5"), id="value-negative"),
    pytest.param(quote_body(value_of_goods=120.5), id="value-as-number"),
    pytest.param(quote_body(mass_unit="g"), id="mass-unit"),
    pytest.param(quote_body(distance_unit="m"), id="distance-unit"),
    pytest.param(quote_body(is_document="yes"), id="boolean-as-text"),
    pytest.param(quote_body(packages=[]), id="no-packages"),
    pytest.param(_package(weight=0), id="zero-weight"),
    pytest.param(_package(width=-1), id="negative-width"),
    pytest.param(_package(height=1e9), id="huge-height"),
    pytest.param(_package(length="30"), id="length-as-text"),
    pytest.param(_package(depth=3), id="unknown-package-field"),
    pytest.param(quote_body(packages=[{"weight": 2, "width": 20, "height": 10}]), id="no-length"),
    pytest.param(quote_body(colour="red"), id="unknown-field"),
    pytest.param(quote_body(hub_transit="true"), id="hub-transit-as-text"),
    pytest.param(
        quote_body(origin_address=address(840, import_code="X")), id="import-code-in-quote"
    ),
    pytest.param(quote_body(origin_address=address(124)), id="address-country-differs-from-lane"),
    pytest.param(
        quote_body(destination_address=address(124, classification="castle")),
        id="unknown-classification",
    ),
]


@pytest.mark.parametrize("body", INVALID_BODIES)
async def test_invalid_quote_is_400_with_exact_body(api: Api, body: dict[str, Any]) -> None:
    reply = await api.call("POST", "/quotes", json=body)
    assert reply.status == 400
    assert reply.body == INVALID  # no "errors" key
    assert reply.headers["X-Sandbox-Detail"]


async def test_non_json_body_is_400(api: Api) -> None:
    bad_json = await api.call(
        "POST", "/quotes", data=b"{nope", headers={"Content-Type": "application/json"}
    )
    form = await api.call("POST", "/quotes", data={"origin_country_id": "840"})
    assert (bad_json.status, bad_json.body) == (400, INVALID)
    assert (form.status, form.body) == (400, INVALID)


async def test_direct_quote_is_flat_with_several_carriers(api: Api) -> None:
    reply = await api.call(
        "POST",
        "/quotes",
        json=quote_body(origin_address=address(840), destination_address=address(124)),
    )
    assert reply.status == 201
    body = reply.body
    assert set(body) == {"id", "estimates"}
    estimates = body["estimates"]
    assert {e["shipping_company"] for e in estimates} >= {"Parcel Express", "Global Freight"}
    assert len({e["shipping_company"] for e in estimates}) >= 3
    assert len({e["estimate_id"] for e in estimates}) == len(estimates)
    for estimate in estimates:
        assert set(estimate) == ESTIMATE_KEYS
        assert estimate["quote_expired"] is False
        assert set(estimate["billable_weight"]) == {"metric", "imperial"}
        for item in estimate["line_items"]:
            assert set(item) == {"description", "cost", "currency_id"}
            assert isinstance(item["cost"], float | int)
    currencies = {item["currency_id"] for e in estimates for item in e["line_items"]}
    assert "USD" in currencies
    assert currencies & {"EUR", "GBP"}


async def test_costs_are_json_numbers_with_two_decimals(api: Api) -> None:
    reply = await api.call("POST", "/quotes", json=quote_body())
    costs = re.findall(r'"cost":([^,}]+)', reply.text)
    assert costs
    assert all(re.fullmatch(r"\d+\.\d{2}", cost) for cost in costs), costs


async def test_billable_weight_is_actual_when_heavier_in_both_systems(api: Api) -> None:
    quote = await api.quote()
    weights = quote["estimates"][0]["billable_weight"]
    assert weights["metric"] == {
        "packages": 1,
        "mass_unit": "kg",
        "distance_unit": "cm",
        "volumetric_weight": 1.2,  # 30 * 20 * 10 / 5000
        "weight": 2.0,
        "billable_weight": 2.0,
    }
    assert weights["imperial"] == {
        "packages": 1,
        "mass_unit": "lb",
        "distance_unit": "inch",
        "volumetric_weight": 2.65,
        "weight": 4.41,
        "billable_weight": 4.41,
    }


async def test_billable_weight_takes_the_higher_per_package_and_sums(api: Api) -> None:
    packages = [
        {"weight": 1, "width": 40, "height": 30, "length": 50},  # volumetric 12 kg
        {"weight": 20, "width": 10, "height": 10, "length": 10},  # volumetric 0.2 kg
    ]
    quote = await api.quote(packages=packages)
    metric = quote["estimates"][0]["billable_weight"]["metric"]
    assert metric["packages"] == 2
    assert metric["weight"] == 21.0
    assert metric["volumetric_weight"] == 12.2
    assert metric["billable_weight"] == 32.0


async def test_imperial_request_uses_the_139_divisor(api: Api) -> None:
    packages = [{"weight": 10, "width": 10, "height": 10, "length": 20}]  # 2000 in3 -> 14.39 lb
    quote = await api.quote(mass_unit="lb", distance_unit="inch", packages=packages)
    weights = quote["estimates"][0]["billable_weight"]
    assert weights["imperial"]["volumetric_weight"] == 14.39
    assert weights["imperial"]["billable_weight"] == 14.39
    assert weights["metric"]["billable_weight"] == 6.53  # the same figure in kg


async def test_heavier_goods_cost_more(api: Api) -> None:
    light = await api.quote()
    heavy = await api.quote(packages=[{"weight": 40, "width": 20, "height": 10, "length": 30}])

    def freight(quote: dict[str, Any]) -> float:
        items = quote["estimates"][0]["line_items"]
        return float(next(i["cost"] for i in items if i["description"] == "Freight"))

    assert freight(heavy) > freight(light)


async def test_hub_quote_is_wrapped_and_in_account_currency(api: Api) -> None:
    reply = await api.call(
        "POST", "/quotes", json=quote_body(destination_country_id=276, hub_transit=True)
    )
    assert reply.status == 201
    assert set(reply.body) == {"quote"}
    quote = reply.body["quote"]
    assert set(quote) == {"id", "estimates", "hub_transit", "dirty", "errors"}
    assert (quote["hub_transit"], quote["dirty"], quote["errors"]) == (True, False, [])
    assert len(quote["estimates"]) == 5  # one combined estimate per service
    for estimate in quote["estimates"]:
        assert set(estimate) == ESTIMATE_KEYS - {"billable_weight"} | {"billable_weights"}
        assert set(estimate["billable_weights"]["metric"]) == BREAKDOWN_KEYS
        assert {item["currency_id"] for item in estimate["line_items"]} == {"USD"}
        descriptions = [item["description"] for item in estimate["line_items"]]
        assert len(descriptions) == len(set(descriptions))  # grouped by description
        assert "Hub handling" in descriptions


async def test_hub_line_items_sum_both_legs_converted(api: Api) -> None:
    hub = await api.quote(destination_country_id=276, hub_transit=True)
    # The clearance leg is origin -> hub (the Netherlands): a direct quote prices it.
    clearance = await api.quote(destination_country_id=528)
    hub_estimate = next(e for e in hub["estimates"] if e["shipping_company"] == "EuroPost")
    leg = next(
        e
        for e in clearance["estimates"]
        if (e["shipping_company"], e["shipping_service"])
        == (hub_estimate["shipping_company"], hub_estimate["shipping_service"])
    )
    eur = CURRENCY_RATES_TO_USD["EUR"]
    leg_freight = next(i for i in leg["line_items"] if i["description"] == "Freight")
    assert leg_freight["currency_id"] == "EUR"
    local_freight_eur = Decimal("8.00") + Decimal("1.20") * Decimal("2")  # local leg, 2 kg
    expected = (Decimal(str(leg_freight["cost"])) + local_freight_eur) * eur
    hub_freight = next(i for i in hub_estimate["line_items"] if i["description"] == "Freight")
    assert abs(Decimal(str(hub_freight["cost"])) - expected) <= Decimal("0.02")


@pytest.mark.parametrize(
    ("origin", "destination"),
    [
        pytest.param(840, 124, id="us-to-canada"),
        pytest.param(276, 840, id="germany-to-us"),
        pytest.param(840, 826, id="us-to-uk-outside-eu"),
    ],
)
async def test_hub_quote_without_hub_is_422(api: Api, origin: int, destination: int) -> None:
    body = quote_body(
        origin_country_id=origin, destination_country_id=destination, hub_transit=True
    )
    reply = await api.call("POST", "/quotes", json=body)
    assert reply.status == 422
    assert reply.body == NO_HUB_BODY


async def test_hub_lanes_are_configurable() -> None:
    lanes = (HubLane(name="Toronto", hub_country_id=124, destination_country_ids=frozenset({840})),)
    async with (
        SandboxServer(token=TOKEN, speed=100, hub_lanes=lanes) as server,
        aiohttp.ClientSession() as session,
    ):
        api = Api(session, server)
        into_us = await api.call(
            "POST",
            "/quotes",
            json=quote_body(origin_country_id=276, destination_country_id=840, hub_transit=True),
        )
        into_eu = await api.call(
            "POST", "/quotes", json=quote_body(destination_country_id=276, hub_transit=True)
        )
    assert into_us.status == 201
    assert into_us.body["quote"]["hub_transit"] is True
    assert into_eu.status == 422


async def test_direct_quote_into_eu_without_hub_flag_is_direct(api: Api) -> None:
    reply = await api.call("POST", "/quotes", json=quote_body(destination_country_id=276))
    assert set(reply.body) == {"id", "estimates"}


@pytest.mark.parametrize("hub", [pytest.param(False, id="direct"), pytest.param(True, id="hub")])
async def test_get_quote_returns_the_creation_shape(api: Api, hub: bool) -> None:
    body = quote_body(destination_country_id=276, hub_transit=hub)
    created = await api.call("POST", "/quotes", json=body)
    quote_id = created.body["quote"]["id"] if hub else created.body["id"]
    fetched = await api.call("GET", f"/quotes/{quote_id}")
    assert fetched.status == 200
    assert fetched.body == created.body


async def test_get_unknown_quote_is_404(api: Api) -> None:
    reply = await api.call("GET", "/quotes/12345")
    assert reply.status == 404
    assert reply.body == {"success": False, "error": "Quote with id 12345 not found", "errors": []}


@pytest.fixture
async def manual() -> AsyncIterator[tuple[Api, ManualClock]]:
    clock = ManualClock()
    async with (
        SandboxServer(token=TOKEN, clock=clock, estimate_validity=900) as server,
        aiohttp.ClientSession() as session,
    ):
        yield Api(session, server), clock


async def test_quote_expires_after_the_validity(manual: tuple[Api, ManualClock]) -> None:
    api, clock = manual
    quote = await api.quote()
    clock.advance(899)
    before = await api.call("GET", f"/quotes/{quote['id']}")
    clock.advance(1)
    after = await api.call("GET", f"/quotes/{quote['id']}")
    assert {e["quote_expired"] for e in before.body["estimates"]} == {False}
    assert {e["quote_expired"] for e in after.body["estimates"]} == {True}


async def test_validity_runs_on_the_scaled_clock() -> None:
    # 5 s of validity at speed 1000 last 5 ms; 50 ms later the quote has long expired.
    async with (
        SandboxServer(token=TOKEN, speed=1000, estimate_validity=5) as server,
        aiohttp.ClientSession() as session,
    ):
        api = Api(session, server)
        quote = await api.quote()
        await asyncio.sleep(0.05)
        reply = await api.call("GET", f"/quotes/{quote['id']}")
    assert reply.body["estimates"][0]["quote_expired"] is True
