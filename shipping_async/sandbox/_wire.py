"""The exact wire JSON of the spec: response bodies, error bodies and date formats."""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from shipping_async.sandbox._pricing import Weights, cents
from shipping_async.sandbox._schemas import OrderAddress
from shipping_async.sandbox._state import Estimate, Order, Quote, ScheduledPickup, Webhook
from shipping_async.sandbox.countries import COUNTRIES

__all__ = [
    "DETAIL_HEADER",
    "INVALID_INPUT",
    "InvalidInput",
    "encode",
    "error_list_response",
    "error_response",
    "format_created_at",
    "format_utc_millis",
    "invalid_input",
    "json_response",
    "order_wire",
    "quote_wire",
    "read_json",
    "scheduled_pickup_wire",
    "success_response",
    "webhook_wire",
]

INVALID_INPUT = "Invalid input, object invalid"
#: Response header carrying why the sandbox refused a request with the spec's terse 400
#: text; the body stays exactly the spec's.
DETAIL_HEADER = "X-Sandbox-Detail"

# Decimals (costs, weights, rates) go out as JSON numbers with their exact digits: 12.30.
_encoder = msgspec.json.Encoder(decimal_format="number")

_DOCUMENT_LINKS = (
    "battery_declaration_link",
    "commercial_invoice_link",
    "customs_clearance_document_link",
    "draft_bill_of_lading_link",
    "eei_request_document_link",
    "export_permit_link",
    "final_bill_of_lading_link",
    "materials_safety_data_sheet_link",
    "packaging_list_link",
    "proof_of_delivery_link",
    "shippers_letter_of_instruction_link",
    "stream_packing_list_link",
    "waybill_document_link",
)
_ADDRESS_FIELDS = ("name", "company", "address_1", "address_2")
_ADDRESS_TAIL = ("city", "province", "postal_code", "country_id", "email", "phone")
_ADDRESS_CODES = ("classification", "import_code", "export_code")


_T = TypeVar("_T")


class InvalidInput(Exception):
    """A request body the spec answers with 400 ``Invalid input, object invalid``.

    The message says why; it goes into the ``X-Sandbox-Detail`` header and the request
    log, never into the body.
    """


async def read_json(request: web.Request, decoder: msgspec.json.Decoder[_T]) -> _T:
    """Decode a JSON body strictly; ``InvalidInput`` when it is not JSON or not the type."""
    if request.content_type != "application/json":
        raise InvalidInput(f"Content-Type must be application/json, got {request.content_type}")
    try:
        return decoder.decode(await request.read())
    except msgspec.DecodeError as exc:
        raise InvalidInput(str(exc)) from exc


def encode(data: Any) -> bytes:
    """JSON bytes of ``data`` with decimals as numbers."""
    return _encoder.encode(data)


def json_response(data: Any, status: int = 200) -> web.Response:
    """A JSON response with ``Content-Type: application/json``."""
    return web.Response(body=encode(data), status=status, content_type="application/json")


def error_response(status: int, error: str) -> web.Response:
    """The common error body ``{"success": false, "error": ..., "errors": []}``."""
    return json_response({"success": False, "error": error, "errors": []}, status)


def error_list_response(status: int, texts: list[str]) -> web.Response:
    """An error body whose ``error`` is a string holding a JSON array of texts (422s)."""
    return error_response(status, encode(texts).decode())


def invalid_input(detail: str) -> web.Response:
    """The 400 of spec 7: only ``success`` and ``error``; ``detail`` goes in a header."""
    response = json_response({"success": False, "error": INVALID_INPUT}, 400)
    # The detail may quote the input: escape control characters (aiohttp drops the
    # connection rather than send them in a header) and non-ASCII ones (read as Latin-1).
    text = " ".join(detail.split()).encode("unicode_escape").decode("ascii")
    response.headers[DETAIL_HEADER] = text
    return response


def success_response() -> web.Response:
    """200 ``{"success": true, "error": "", "errors": []}``."""
    return json_response({"success": True, "error": "", "errors": []})


def format_created_at(moment: datetime) -> str:
    """``YYYY/MM/DD HH:MM:SS UTC``."""
    return moment.strftime("%Y/%m/%d %H:%M:%S UTC")


def format_utc_millis(moment: datetime) -> str:
    """ISO 8601 UTC with milliseconds and a ``Z``: ``2026-01-05T09:00:00.000Z``."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _weights(weights: Weights) -> dict[str, Any]:
    return {"metric": weights.metric, "imperial": weights.imperial}


def _estimate(estimate: Estimate, *, expired: bool, weight_key: str) -> dict[str, Any]:
    return {
        "estimate_id": estimate.id,
        "shipping_company": estimate.carrier,
        "shipping_service": estimate.service,
        "quote_expired": expired,
        "line_items": [
            {
                "description": item.description,
                "cost": cents(item.cost),
                "currency_id": item.currency_id,
            }
            for item in estimate.line_items
        ],
        weight_key: _weights(estimate.weights),
    }


def quote_wire(quote: Quote, *, expired: bool) -> dict[str, Any]:
    """A direct quote flat ``{id, estimates}``; a hub quote wrapped in ``quote`` and spelling
    the weight key ``billable_weights`` (spec 2.1, 2.2)."""
    if not quote.hub_transit:
        return {
            "id": quote.id,
            "estimates": [
                _estimate(e, expired=expired, weight_key="billable_weight") for e in quote.estimates
            ],
        }
    return {
        "quote": {
            "id": quote.id,
            "estimates": [
                _estimate(e, expired=expired, weight_key="billable_weights")
                for e in quote.estimates
            ],
            "hub_transit": True,
            "dirty": False,
            "errors": [],
        }
    }


def _address(address: OrderAddress | None, address_id: int | None) -> dict[str, Any] | None:
    if address is None or address_id is None:
        return None
    country = COUNTRIES[address.country_id]
    postal_code = address.postal_code or country.default_postal_code
    wire: dict[str, Any] = {"id": address_id}
    wire.update((name, getattr(address, name)) for name in _ADDRESS_FIELDS)
    wire["address_3"] = None
    wire.update((name, getattr(address, name)) for name in _ADDRESS_TAIL)
    wire["postal_code"] = postal_code
    wire["country"] = country.to_wire()
    wire.update((name, getattr(address, name)) for name in _ADDRESS_CODES)
    parts = (
        address.name,
        address.company,
        address.address_1,
        address.address_2,
        address.city,
        address.province,
        postal_code,
        country.name,
    )
    wire["latitude"] = country.latitude
    wire["longitude"] = country.longitude
    wire["summary"] = ", ".join(part for part in parts if part)
    wire["tax_number"] = None
    wire["time_zone_id"] = country.time_zone_id
    return wire


def order_wire(order: Order) -> dict[str, Any]:
    """The full Order of spec 2.6 (every field, nulls included), without the wrapper."""
    first = order.legs[0]
    request = order.request
    destination_email = request.destination_address.email
    clearance = request.clearance_detail
    wire: dict[str, Any] = {
        "id": order.id,
        "assigned_admin": order.assigned_admin,
        "status": order.status,
        "ccd_status": "ccd_not_required",
        "created_at": format_created_at(order.created_at),
        "customer_reference": request.customer_reference,
        "reference_number": order.reference_number,
        "internal_transaction_number": order.internal_transaction_number,
        "description_of_contents": request.description_of_contents,
        "purpose_of_shipment_id": request.purpose_of_shipment_id,
        "quote_id": order.quote.id,
        "company_id": order.company_id,
    }
    for role in (
        "origin_address",
        "destination_address",
        "broker_address",
        "importer_of_record_address",
    ):
        wire[role] = _address(order.address(role), order.address_ids.get(role))
    wire.update(
        {
            "pickup_date": order.pickup_date.isoformat(),
            "pickup_instructions": request.pickup_instructions,
            "scheduled_pickup": order.scheduled_pickup,
            "date_delivered": (
                format_created_at(order.date_delivered) if order.date_delivered else None
            ),
            "eei_eligible": bool(order.internal_transaction_number),
            "send_consignee_tracking_details": bool(destination_email),
            "value_of_goods": cents(order.quote.value_of_goods),
            "value_of_goods_currency": order.quote.value_of_goods_currency,
            "measured_weight": None,
            "invoice_data": None,
            "invoice_number": clearance.invoice_number if clearance else None,
            "waybill": first.waybill or None,
            "tracking_link": first.tracking_link or None,
            "shipments": [
                {
                    "shipping_service": leg.shipping_service,
                    "waybill": leg.waybill,
                    "waybill_document_link": leg.waybill_document_link,
                    "tracking_link": leg.tracking_link,
                    "status": leg.status,
                }
                for leg in order.legs
            ],
        }
    )
    for link in _DOCUMENT_LINKS:
        wire[link] = order.documents.get(link, "")
    wire["waybill_document_link"] = first.waybill_document_link
    return wire


def scheduled_pickup_wire(pickup: ScheduledPickup) -> dict[str, Any]:
    """The Scheduled pickup of spec 2.8."""
    return {
        "id": pickup.id,
        "time_from": pickup.time_from,
        "time_to": pickup.time_to,
        "scheduled_date": pickup.scheduled_date,
        "confirmation_number": pickup.confirmation_number,
        "freight_confirmation_number": pickup.freight_confirmation_number,
        "error_message": pickup.error_message,
    }


def webhook_wire(webhook: Webhook) -> dict[str, Any]:
    """The Webhook of spec 2.9, without the wrapper."""
    return {
        "id": webhook.id,
        "target_url": webhook.target_url,
        "events": list(webhook.events),
        "token": webhook.token,
        "status": webhook.status,
    }
