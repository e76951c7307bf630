"""POST /quotes and GET /quotes/{id}: validation, direct and hub estimates."""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation

import msgspec
from aiohttp import web

from shipping_async.sandbox._config import HubLane
from shipping_async.sandbox._core import SANDBOX_KEY, Sandbox
from shipping_async.sandbox._pricing import (
    CARRIER_SERVICES,
    CURRENCY_RATES_TO_USD,
    PURPOSES,
    billable_weights,
    combine_legs,
    convert,
    local_leg_items,
    price_leg,
)
from shipping_async.sandbox._schemas import QuoteAddress, QuoteRequest
from shipping_async.sandbox._state import Estimate, LocalLeg, Quote
from shipping_async.sandbox._wire import (
    InvalidInput,
    error_list_response,
    error_response,
    json_response,
    quote_wire,
    read_json,
)
from shipping_async.sandbox.countries import COUNTRIES

__all__ = ["CLASSIFICATIONS", "NO_HUB", "parse_amount", "routes"]

NO_HUB = "Hub transit No hub is available for this route."
#: Address classifications the sandbox accepts (the values the spec shows).
CLASSIFICATIONS = frozenset({"business", "residential"})
#: Per unit: the largest package weight or dimension the sandbox accepts.
_MAXIMUM = {"kg": 1000.0, "lb": 2200.0, "cm": 400.0, "inch": 157.0}
_MAX_PACKAGES = 50
_MAX_VALUE = Decimal("10000000")

_decoder = msgspec.json.Decoder(QuoteRequest)


def parse_amount(text: str, field: str) -> Decimal:
    """A non-negative decimal amount sent as text; ``InvalidInput`` otherwise."""
    try:
        amount = Decimal(text.strip())
    except InvalidOperation:
        raise InvalidInput(f"{field}: {text!r} is not a decimal number") from None
    if not amount.is_finite() or amount < 0 or amount > _MAX_VALUE:
        raise InvalidInput(f"{field}: must be between 0 and {_MAX_VALUE}, got {text!r}")
    return amount


def _check_address(address: QuoteAddress | None, role: str, country_id: int) -> None:
    if address is None:
        return
    if address.country_id is not None and address.country_id != country_id:
        raise InvalidInput(f"{role}.country_id {address.country_id} differs from the lane")
    if address.classification is not None and address.classification not in CLASSIFICATIONS:
        raise InvalidInput(f"{role}.classification must be one of {sorted(CLASSIFICATIONS)}")


def _validate(body: QuoteRequest) -> Decimal:
    for field in ("origin_country_id", "destination_country_id"):
        if getattr(body, field) not in COUNTRIES:
            raise InvalidInput(f"{field}: unknown country id {getattr(body, field)}")
    if body.purpose_of_shipment_id not in PURPOSES:
        raise InvalidInput(f"purpose_of_shipment_id: unknown id {body.purpose_of_shipment_id}")
    if body.value_of_goods_currency_id not in CURRENCY_RATES_TO_USD:
        raise InvalidInput(f"value_of_goods_currency_id: unknown {body.value_of_goods_currency_id}")
    value = parse_amount(body.value_of_goods, "value_of_goods")
    if not 1 <= len(body.packages) <= _MAX_PACKAGES:
        raise InvalidInput(f"packages: between 1 and {_MAX_PACKAGES} packages")
    for index, package in enumerate(body.packages):
        for field, unit in (
            ("weight", body.mass_unit),
            ("width", body.distance_unit),
            ("height", body.distance_unit),
            ("length", body.distance_unit),
        ):
            number = getattr(package, field)
            if not (math.isfinite(number) and 0 < number <= _MAXIMUM[unit]):
                raise InvalidInput(
                    f"packages[{index}].{field}: must be > 0 and <= {_MAXIMUM[unit]:g} {unit}"
                )
    _check_address(body.origin_address, "origin_address", body.origin_country_id)
    _check_address(body.destination_address, "destination_address", body.destination_country_id)
    return value


def _hub_lane(sandbox: Sandbox, body: QuoteRequest) -> HubLane | None:
    for lane in sandbox.config.hub_lanes:
        if lane.serves(body.origin_country_id, body.destination_country_id):
            return lane
    return None


def _build_quote(
    sandbox: Sandbox, body: QuoteRequest, value: Decimal, lane: HubLane | None
) -> Quote:
    store = sandbox.store
    origin = COUNTRIES[body.origin_country_id]
    destination = COUNTRIES[body.destination_country_id]
    weights = billable_weights(
        [(p.weight, p.length, p.width, p.height) for p in body.packages],
        body.mass_unit,
        body.distance_unit,
    )
    protected = (
        convert(value, body.value_of_goods_currency_id, "USD")
        if body.is_shipment_protection_required
        else None
    )
    quote = Quote(
        id=store.next_id("quote"),
        created_at=sandbox.clock.monotonic(),
        origin_country_id=origin.id,
        destination_country_id=destination.id,
        value_of_goods=value,
        value_of_goods_currency=body.value_of_goods_currency_id,
        estimates=[],
        hub_lane=lane,
    )
    clearance_destination = COUNTRIES[lane.hub_country_id] if lane else destination
    for service in CARRIER_SERVICES:
        items = price_leg(
            service,
            origin=origin,
            destination=clearance_destination,
            billable_kg=weights.billable_kg,
            is_document=body.is_document,
            is_stackable=body.is_stackable,
            is_liftgate_required=body.is_liftgate_required,
            protected_value_usd=protected,
        )
        estimate = Estimate(
            id=store.next_id("estimate"),
            quote_id=quote.id,
            carrier=service.carrier,
            service=service.service,
            line_items=items,
            weights=weights,
        )
        if lane is not None:
            local = local_leg_items(billable_kg=weights.billable_kg, currency=lane.local_currency)
            estimate.local_leg = LocalLeg(
                estimate_id=store.next_id("estimate"),
                carrier=lane.local_carrier,
                service=lane.local_service,
                line_items=local,
            )
            estimate.line_items = combine_legs([items, local], sandbox.config.account_currency)
        quote.estimates.append(estimate)
        store.estimates[estimate.id] = estimate
    store.quotes[quote.id] = quote
    return quote


async def create_quote(request: web.Request) -> web.Response:
    """POST /quotes: 201 with a direct (flat) or hub (wrapped) quote; 422 without a hub."""
    sandbox = request.app[SANDBOX_KEY]
    body = await read_json(request, _decoder)
    value = _validate(body)
    lane = _hub_lane(sandbox, body) if body.hub_transit else None
    if body.hub_transit and lane is None:
        return error_list_response(422, [NO_HUB])
    quote = _build_quote(sandbox, body, value, lane)
    return json_response(quote_wire(quote, expired=False), 201)


async def get_quote(request: web.Request) -> web.Response:
    """GET /quotes/{id}: the creation shape with the current ``quote_expired``."""
    sandbox = request.app[SANDBOX_KEY]
    quote_id = int(request.match_info["id"])
    quote = sandbox.store.quotes.get(quote_id)
    if quote is None:
        return error_response(404, f"Quote with id {quote_id} not found")
    return json_response(quote_wire(quote, expired=sandbox.estimate_expired(quote)))


def routes(prefix: str) -> list[web.RouteDef]:
    """The quote routes under ``prefix``."""
    return [
        web.post(f"{prefix}/quotes", create_quote),
        web.get(prefix + "/quotes/{id:\\d+}", get_quote),
    ]
