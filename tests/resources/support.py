"""Shared by the client tests: response bodies after the spec's tables, fakes, helpers."""

from __future__ import annotations

import email.policy
import json
from decimal import Decimal
from email.parser import BytesParser
from types import SimpleNamespace
from typing import Any

import aiohttp
from aioresponses import CallbackResult, aioresponses
from yarl import URL

from shipping_async._client import AsyncShippingClient
from shipping_async.clock import ManualClock
from shipping_async.limiter import Permit
from shipping_async.models import Address, HSCode, OrderRequest, Package, QuoteRequest

BASE_URL = "https://api.shipping.test/client_api/v2"
TOKEN = "tok_live_5ecret-VALUE-never-shown"


def country(country_id: int = 840) -> dict[str, Any]:
    iso2, iso3, name, currency = {
        840: ("US", "USA", "United States", "USD"),
        276: ("DE", "DEU", "Germany", "EUR"),
        826: ("GB", "GBR", "United Kingdom", "GBP"),
    }[country_id]
    return {
        "id": country_id,
        "default_postal_code": None,
        "carrier_export_code": f"carrier_export_{iso2}",
        "carrier_import_code": f"carrier_import_{iso2}",
        "carrier_tax_code": f"carrier_tax_{iso2}",
        "export_code_label": "EORI",
        "import_code_label": "EORI",
        "iso_code_2": iso2,
        "iso_code_3": iso3,
        "name": name,
        "postal_code_required": True,
        "tax_number_label": "VAT number",
        "taxes_and_duties_config": {
            "id": country_id,
            "minimum_value_of_goods": 150.5,
            "minimum_value_of_goods_currency_id": currency,
        },
        "vat_rate": 0.19,
    }


def order_address(country_id: int = 840, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": 10 + country_id,
        "name": "Ada Lovelace",
        "company": "Analytical Engines",
        "address_1": "1 Main Street",
        "address_2": "Suite 2",
        "address_3": None,
        "city": "New York" if country_id == 840 else "Berlin",
        "province": "NY" if country_id == 840 else "BE",
        "postal_code": "10001" if country_id == 840 else "10115",
        "country_id": country_id,
        "country": country(country_id),
        "email": "ada@example.test",
        "phone": "+1 212 555 0100",
        "classification": "business",
        "import_code": None,
        "export_code": "EX-123",
        "latitude": 40.7506,
        "longitude": -73.9935,
        "summary": "1 Main Street, Suite 2",
        "tax_number": None,
        "time_zone_id": "America/New_York" if country_id == 840 else "Europe/Berlin",
    }
    body.update(changes)
    return body


def shipment(service: str = "express", waybill: str = "WB-1", status: str = "order_received"):
    return {
        "shipping_service": service,
        "waybill": waybill,
        "waybill_document_link": f"https://docs.test/{waybill}.pdf",
        "tracking_link": f"https://track.test/{waybill}",
        "status": status,
    }


_LINKS = (
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


def order(*, hub: bool = False, **changes: Any) -> dict[str, Any]:
    """Every field of section 2.6; ``hub=True`` gives the two-leg shape."""
    legs = (
        [shipment("clearance", "WB-CLR-1"), shipment("local", "WB-LOC-2")]
        if hub
        else [shipment("express", "WB-1")]
    )
    body: dict[str, Any] = {
        "id": 7001,
        "assigned_admin": "ops@shipping.test",
        "status": "order_received",
        "ccd_status": "ccd_not_required",
        "created_at": "2026/01/05 09:30:15 UTC",
        "customer_reference": "PO-2026-0001",
        "reference_number": "REF-7001",
        "internal_transaction_number": "ITN-7001",
        "description_of_contents": "Books",
        "purpose_of_shipment_id": 1,
        "quote_id": 501,
        "company_id": 42,
        "origin_address": order_address(840),
        "destination_address": order_address(276),
        "broker_address": None,
        "importer_of_record_address": None,
        "pickup_date": "2026-01-07",
        "pickup_instructions": "Ring twice",
        "scheduled_pickup": "",
        "date_delivered": None,
        "eei_eligible": False,
        "send_consignee_tracking_details": True,
        "value_of_goods": 120.1,
        "value_of_goods_currency": "USD",
        "measured_weight": None,
        "invoice_data": None,
        "invoice_number": None,
        "waybill": legs[0]["waybill"],
        "tracking_link": legs[0]["tracking_link"],
        "shipments": legs,
    }
    body.update(dict.fromkeys(_LINKS, ""))
    body["waybill_document_link"] = legs[0]["waybill_document_link"]
    body.update(changes)
    return body


def weight_breakdown(metric: bool = True) -> dict[str, Any]:
    return {
        "packages": 2,
        "mass_unit": "kg" if metric else "lb",
        "distance_unit": "cm" if metric else "inch",
        "volumetric_weight": 3.2 if metric else 7.05,
        "weight": 2.5 if metric else 5.51,
        "billable_weight": 3.2 if metric else 7.05,
    }


def estimate(estimate_id: int = 9001, *, key: str = "billable_weight", **changes: Any):
    body: dict[str, Any] = {
        "estimate_id": estimate_id,
        "shipping_company": "Carrier One",
        "shipping_service": "express",
        "quote_expired": False,
        "line_items": [
            {"description": "Freight", "cost": 10.1, "currency_id": "USD"},
            {"description": "Fuel surcharge", "cost": 0.2, "currency_id": "USD"},
            {"description": "Duties", "cost": 0.7, "currency_id": "USD"},
        ],
        key: {"metric": weight_breakdown(True), "imperial": weight_breakdown(False)},
    }
    body.update(changes)
    return body


def direct_quote() -> dict[str, Any]:
    """The flat shape of POST /quotes (section 2.1)."""
    return {"id": 501, "estimates": [estimate(9001), estimate(9002, shipping_service="economy")]}


def hub_quote() -> dict[str, Any]:
    """The wrapped hub shape, with the ``billable_weights`` spelling."""
    return {
        "quote": {
            "id": 502,
            "hub_transit": True,
            "dirty": False,
            "errors": [],
            "estimates": [estimate(9101, key="billable_weights")],
        }
    }


def pickup_availabilities() -> list[dict[str, Any]]:
    return [
        {
            "pickup_date": "06-01-2026",
            "cut_off_time": "14:00.00",
            "minimum_access_duration_minutes": 120,
            "earliest_pickup_time": "09:30.00",
            "time_zone_id": "America/New_York",
        },
        {
            "pickup_date": "07-01-2026",
            "cut_off_time": "14:00.00",
            "minimum_access_duration_minutes": 120,
            "earliest_pickup_time": "10:00.00",
            "time_zone_id": "America/New_York",
        },
    ]


def scheduled_pickup(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": 33,
        "time_from": "10:00",
        "time_to": "12:00",
        "scheduled_date": "07-01-2026",
        "confirmation_number": "CONF-1",
        "freight_confirmation_number": "FRT-9",
        "error_message": None,
    }
    body.update(changes)
    return body


def webhook(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": 77,
        "target_url": "https://hooks.example.test/shipping",
        "events": ["shipment.updated.status"],
        "token": "whk_token_abc",
        "status": "active",
    }
    body.update(changes)
    return body


SUCCESS = {"success": True, "error": "", "errors": []}


def quote_request(**changes: Any) -> QuoteRequest:
    fields: dict[str, Any] = {
        "origin_country_id": 840,
        "destination_country_id": 276,
        "is_document": False,
        "is_stackable": True,
        "is_liftgate_required": False,
        "purpose_of_shipment_id": 1,
        "is_shipment_protection_required": False,
        "value_of_goods": Decimal("120.10"),
        "value_of_goods_currency_id": "USD",
        "mass_unit": "kg",
        "distance_unit": "cm",
        "packages": [Package(weight=2.5, width=20, height=10, length=30)],
    }
    fields.update(changes)
    return QuoteRequest(**fields)


def address(country_id: int = 840, **changes: Any) -> Address:
    fields: dict[str, Any] = {
        "name": "Ada Lovelace",
        "address_1": "1 Main Street",
        "city": "New York" if country_id == 840 else "Berlin",
        "country_id": country_id,
        "postal_code": "10001" if country_id == 840 else "10115",
    }
    fields.update(changes)
    return Address(**fields)


def order_request(**changes: Any) -> OrderRequest:
    fields: dict[str, Any] = {
        "origin_address": address(840, export_code="EX-123"),
        "destination_address": address(276),
        "pickup_instructions": "Ring twice",
        "purpose_of_shipment_id": 1,
        "quote_estimate_id": 9001,
        "customer_reference": "PO-2026-0001",
        "description_of_contents": "Books",
        "hs_codes": [
            HSCode(
                code="4901.99",
                description="Printed books",
                quantity=3,
                cost=Decimal("40.00"),
                weight=0.8,
                country_id=840,
            )
        ],
    }
    fields.update(changes)
    return OrderRequest(**fields)


class _StubStreamWriter:
    output_size = 0


class _CompatResponse(aiohttp.ClientResponse):
    """aioresponses 0.7.9 builds responses without the ``stream_writer`` that aiohttp 3.14
    requires (pnuckowski/aioresponses#289, open); supply a stub until a release fixes it."""

    def __init__(self, method: str, url: URL, **kwargs: Any) -> None:
        kwargs.setdefault("stream_writer", _StubStreamWriter())
        super().__init__(method, url, **kwargs)


class MockAPI(aioresponses):
    """aioresponses whose responses work on aiohttp 3.14."""

    def add(self, url: Any, method: str = "GET", **kwargs: Any) -> None:  # type: ignore[override]
        kwargs.setdefault("response_class", _CompatResponse)
        super().add(url, method, **kwargs)


def reply(status: int = 200, payload: Any = None, **kwargs: Any) -> CallbackResult:
    """A response for an aioresponses callback (with the aiohttp 3.14 shim)."""
    return CallbackResult(status=status, payload=payload, response_class=_CompatResponse, **kwargs)


class FakeLimiter:
    """An OrderLimiter that grants at once and records every call."""

    def __init__(self, limit: int = 20, window: float = 60.0) -> None:
        self.limit = limit
        self.window = window
        self.calls: list[tuple[Any, ...]] = []
        self._next = 0

    def next_free_at(self) -> float | None:
        return 0.0

    def queued(self) -> int:
        return 0

    async def acquire(self, *, front: bool = False) -> Permit:
        self._next += 1
        self.calls.append(("acquire", front))
        return Permit(id=str(self._next), acquired_at=0.0)

    async def release(self, permit: Permit, *, sent: bool) -> None:
        self.calls.append(("release", permit.id, sent))

    async def pause(
        self, seconds: float, *, limit: int | None = None, window: float | None = None
    ) -> None:
        self.calls.append(("pause", seconds, limit, window))


def connect_refused() -> aiohttp.ClientConnectorError:
    """What aiohttp raises when the TCP connection cannot be opened (nothing was sent)."""
    key = SimpleNamespace(host="api.shipping.test", port=443, ssl=True)
    return aiohttp.ClientConnectorError(key, OSError(111, "Connection refused"))  # type: ignore[arg-type]


def make_client(**options: Any) -> AsyncShippingClient:
    """A client on a ManualClock that skips waits, with a FakeLimiter unless given one."""
    options.setdefault("base_url", BASE_URL)
    options.setdefault("clock", ManualClock(auto_advance=True))
    options.setdefault("order_limiter", FakeLimiter())
    return AsyncShippingClient(TOKEN, **options)


def sent_json(mock: aioresponses, method: str, path: str, index: int = 0) -> Any:
    """The JSON body of the index-th request sent to ``path``."""
    call = mock.requests[(method, URL(BASE_URL + path))][index]
    return json.loads(call.kwargs["data"])


def sent_headers(mock: aioresponses, method: str, path: str, index: int = 0) -> dict[str, str]:
    return dict(mock.requests[(method, URL(BASE_URL + path))][index].kwargs["headers"])


def calls(mock: aioresponses, method: str, path: str) -> int:
    return len(mock.requests.get((method, URL(BASE_URL + path)), []))


async def multipart_parts(form: aiohttp.FormData) -> list[tuple[str, str | None, str, bytes]]:
    """(name, filename, content type, content) of every part, in order."""
    writer = form()
    body = await writer.as_bytes()
    head = f"Content-Type: {writer.content_type}\r\n\r\n".encode()
    message = BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    parts = []
    for part in message.iter_parts():
        parts.append(
            (
                part.get_param("name", header="content-disposition"),
                part.get_filename(),
                part.get_content_type(),
                part.get_payload(decode=True),
            )
        )
    return parts
