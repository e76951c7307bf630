"""Orders: create (JSON or multipart), get, cancel, and create waybills."""

from __future__ import annotations

from decimal import Decimal
from urllib.parse import quote as url_quote
from zoneinfo import ZoneInfo

import msgspec
from aiohttp import web

from shipping_async.sandbox._core import ACCOUNT_KEY, SANDBOX_KEY, Sandbox
from shipping_async.sandbox._log import note
from shipping_async.sandbox._multipart import Upload, read_order_form
from shipping_async.sandbox._pickups import offered_dates
from shipping_async.sandbox._pricing import PURPOSES, carrier_code, convert
from shipping_async.sandbox._quotes import CLASSIFICATIONS, parse_amount
from shipping_async.sandbox._schemas import OrderAddress, OrderBody, OrderRequest
from shipping_async.sandbox._state import (
    PRE_PICKUP_STATUSES,
    PRE_WAYBILL_STATUSES,
    Document,
    Leg,
    Order,
)
from shipping_async.sandbox._wire import (
    InvalidInput,
    error_response,
    json_response,
    order_wire,
    read_json,
    success_response,
)
from shipping_async.sandbox.countries import COUNTRIES

__all__ = ["ADDRESS_ROLES", "GONE_LIVE", "routes"]

GONE_LIVE = "Order cannot be cancelled, this shipment has already gone live"
ADDRESS_ROLES = (
    "origin_address",
    "destination_address",
    "broker_address",
    "importer_of_record_address",
)
ASSIGNED_ADMIN = "account.manager@shipping-sandbox.example"
#: Goods leaving the US above this value (USD) need an EEI filing (and get an ITN).
_EEI_THRESHOLD_USD = Decimal(2500)
_decoder = msgspec.json.Decoder(OrderRequest)


async def _read(request: web.Request) -> tuple[OrderRequest, list[Upload]]:
    if request.content_type == "multipart/form-data":
        return await read_order_form(request)
    return await read_json(request, _decoder), []


def _check_address(address: OrderAddress | None, role: str) -> None:
    if address is None:
        return
    for field in ("name", "address_1", "city"):
        if not getattr(address, field).strip():
            raise InvalidInput(f"{role}.{field}: must not be empty")
    if address.country_id not in COUNTRIES:
        raise InvalidInput(f"{role}.country_id: unknown country id {address.country_id}")
    if address.classification is not None and address.classification not in CLASSIFICATIONS:
        raise InvalidInput(f"{role}.classification must be one of {sorted(CLASSIFICATIONS)}")


def _validate(body: OrderBody) -> None:
    for field in ("customer_reference", "description_of_contents"):
        if not getattr(body, field).strip():
            raise InvalidInput(f"order.{field}: must not be empty")
    if body.purpose_of_shipment_id not in PURPOSES:
        raise InvalidInput(
            f"order.purpose_of_shipment_id: unknown id {body.purpose_of_shipment_id}"
        )
    for role in ADDRESS_ROLES:
        _check_address(getattr(body, role), f"order.{role}")
    for index, hs in enumerate(body.hs_codes or ()):
        where = f"order.hs_codes[{index}]"
        if not hs.code.strip() or hs.quantity < 1:
            raise InvalidInput(f"{where}: code must not be empty and quantity must be >= 1")
        parse_amount(hs.cost, f"{where}.cost")
        if hs.country_id is not None and hs.country_id not in COUNTRIES:
            raise InvalidInput(f"{where}.country_id: unknown country id {hs.country_id}")


def _document(
    sandbox: Sandbox, request: web.Request, filename: str, content_type: str, content: bytes
) -> str:
    document = Document(sandbox.store.token(), filename, content_type, content)
    sandbox.store.documents[document.id] = document
    origin = request.url.origin()
    return f"{origin}/_sandbox/documents/{document.id}/{url_quote(filename)}"


def _new_order(sandbox: Sandbox, request: web.Request, body: OrderBody) -> Order:
    store = sandbox.store
    estimate = store.estimates.get(body.quote_estimate_id)
    if estimate is None:
        raise InvalidInput(
            f"order.quote_estimate_id: {body.quote_estimate_id} is not an estimate of a quote"
        )
    quote = store.quotes[estimate.quote_id]
    if sandbox.estimate_expired(quote):
        raise InvalidInput(f"order.quote_estimate_id: estimate {estimate.id} has expired")
    # The lane is always the quote's: addresses never re-route (spec 4.3 rule 3).
    legs = [Leg(estimate.carrier, estimate.service, status="", clears_customs=True)]
    if estimate.local_leg is not None:
        local = estimate.local_leg
        legs.append(Leg(local.carrier, local.service, status="", clears_customs=False))
    value_usd = convert(quote.value_of_goods, quote.value_of_goods_currency, "USD")
    eei = quote.origin_country_id == 840 and value_usd > _EEI_THRESHOLD_USD
    origin_zone = ZoneInfo(COUNTRIES[quote.origin_country_id].time_zone_id)
    return Order(
        id=store.next_id("order"),
        quote=quote,
        estimate=estimate,
        request=body,
        created_at=sandbox.clock.now(),
        legs=legs,
        address_ids={
            role: store.next_id("address") for role in ADDRESS_ROLES if getattr(body, role)
        },
        reference_number="SBX" + store.digits(8),
        company_id=store.company_id,
        assigned_admin=ASSIGNED_ADMIN,
        pickup_date=offered_dates(sandbox, origin_zone)[0],
        internal_transaction_number="X" + store.digits(14) if eei else "",
    )


async def create_order(request: web.Request) -> web.Response:
    """POST /orders: 201 ``{"order": Order}``; 400 on bad input; 429 over the rate limit."""
    sandbox = request.app[SANDBOX_KEY]
    record = note()
    refused: InvalidInput | None = None
    try:
        parsed, uploads = await _read(request)
        record.customer_reference = parsed.order.customer_reference
    except InvalidInput as exc:
        refused = exc
    if not sandbox.limiter.admit(request[ACCOUNT_KEY]):
        return error_response(429, sandbox.rate_text())
    if refused is not None:
        raise refused
    body = parsed.order
    _validate(body)
    order = _new_order(sandbox, request, body)
    for upload in uploads:
        # Documents attach once, to the leg that clears customs (spec 4.3 rule 4).
        order.documents[upload.link_field] = _document(
            sandbox, request, upload.filename, upload.content_type, upload.content
        )
    sandbox.store.orders[order.id] = order
    record.order_id = order.id
    # Every leg is received at the order's creation: one moment, so a hub order's two
    # order_received events are byte-identical, as the API's are.
    created = sandbox.clock.now()
    for index in range(len(order.legs)):
        sandbox.set_leg_status(order, index, "order_received", at=created)
    return json_response({"order": order_wire(order)}, 201)


def _lookup(sandbox: Sandbox, request: web.Request) -> Order | web.Response:
    order_id = int(request.match_info["id"])
    order = sandbox.store.orders.get(order_id)
    if order is None:
        return error_response(404, f"Order with id {order_id} not found")
    return order


async def get_order(request: web.Request) -> web.Response:
    """GET /orders/{id}: 200 ``{"order": Order}``."""
    order = _lookup(request.app[SANDBOX_KEY], request)
    if isinstance(order, web.Response):
        return order
    return json_response({"order": order_wire(order)})


async def cancel_order(request: web.Request) -> web.Response:
    """DELETE /orders/{id}: every leg cancelled, no event; 422 once any leg has gone live."""
    order = _lookup(request.app[SANDBOX_KEY], request)
    if isinstance(order, web.Response):
        return order
    if any(leg.status not in PRE_PICKUP_STATUSES for leg in order.legs):
        return error_response(422, GONE_LIVE)
    for leg in order.legs:
        leg.status = "cancelled"  # cancellation fires nothing (spec 6)
    return success_response()


async def create_waybills(request: web.Request) -> web.Response:
    """POST /orders/{id}/waybills: a waybill per leg (once), 201 ``{"order": Order}``."""
    sandbox = request.app[SANDBOX_KEY]
    order = _lookup(sandbox, request)
    if isinstance(order, web.Response):
        return order
    if order.status == "cancelled":
        return error_response(422, f"Order with id {order.id} is cancelled")
    store = sandbox.store
    for index, leg in enumerate(order.legs):
        if leg.waybill:
            continue  # generating again keeps the waybills already assigned
        prefix = carrier_code(leg.carrier)
        leg.waybill = prefix + store.digits(10)
        leg.tracking_link = f"https://tracking.sandbox.invalid/{prefix.lower()}/{leg.waybill}"
        pdf = b"%PDF-1.4\n% shipping-async sandbox waybill " + leg.waybill.encode() + b"\n"
        leg.waybill_document_link = _document(
            sandbox, request, f"waybill-{leg.waybill}.pdf", "application/pdf", pdf
        )
        sandbox.emit(order, "shipment.updated.waybill", "", leg.waybill)
        if leg.status in PRE_WAYBILL_STATUSES:
            sandbox.set_leg_status(order, index, "awaiting_schedule_pickup")
    return json_response({"order": order_wire(order)}, 201)


def routes(prefix: str) -> list[web.RouteDef]:
    """The order routes under ``prefix``."""
    return [
        web.post(f"{prefix}/orders", create_order),
        web.get(prefix + "/orders/{id:\\d+}", get_order),
        web.delete(prefix + "/orders/{id:\\d+}", cancel_order),
        web.post(prefix + "/orders/{id:\\d+}/waybills", create_waybills),
    ]
