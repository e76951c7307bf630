"""Request bodies and a raw HTTP helper for the sandbox tests (no SDK client involved)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aiohttp

from shipping_async.sandbox import SandboxServer

TOKEN = "sandbox-test-token"
INVALID = {"success": False, "error": "Invalid input, object invalid"}
#: Every key of the Order of spec 2.6.
ORDER_KEYS = {
    "id", "assigned_admin", "status", "ccd_status", "created_at", "customer_reference",
    "reference_number", "internal_transaction_number", "description_of_contents",
    "purpose_of_shipment_id", "quote_id", "company_id", "origin_address",
    "destination_address", "broker_address", "importer_of_record_address", "pickup_date",
    "pickup_instructions", "scheduled_pickup", "date_delivered", "eei_eligible",
    "send_consignee_tracking_details", "value_of_goods", "value_of_goods_currency",
    "measured_weight", "invoice_data", "invoice_number", "waybill", "tracking_link",
    "shipments", "battery_declaration_link", "commercial_invoice_link",
    "customs_clearance_document_link", "draft_bill_of_lading_link",
    "eei_request_document_link", "export_permit_link", "final_bill_of_lading_link",
    "materials_safety_data_sheet_link", "packaging_list_link", "proof_of_delivery_link",
    "shippers_letter_of_instruction_link", "stream_packing_list_link", "waybill_document_link",
}  # fmt: skip
#: Every key of an address in an order response (spec 2.4).
ADDRESS_KEYS = {
    "id", "name", "company", "address_1", "address_2", "address_3", "city", "province",
    "postal_code", "country_id", "country", "email", "phone", "classification",
    "import_code", "export_code", "latitude", "longitude", "summary", "tax_number",
    "time_zone_id",
}  # fmt: skip
COUNTRY_KEYS = {
    "id", "default_postal_code", "carrier_export_code", "carrier_import_code",
    "carrier_tax_code", "export_code_label", "import_code_label", "iso_code_2", "iso_code_3",
    "name", "postal_code_required", "tax_number_label", "taxes_and_duties_config", "vat_rate",
}  # fmt: skip


def quote_body(**overrides: Any) -> dict[str, Any]:
    """A valid direct quote request US -> CA, 1 package of 2 kg, 30x20x10 cm."""
    body: dict[str, Any] = {
        "origin_country_id": 840,
        "destination_country_id": 124,
        "is_document": False,
        "is_stackable": True,
        "is_liftgate_required": False,
        "purpose_of_shipment_id": 1,
        "is_shipment_protection_required": False,
        "value_of_goods": "120.50",
        "value_of_goods_currency_id": "USD",
        "mass_unit": "kg",
        "distance_unit": "cm",
        "packages": [{"weight": 2, "width": 20, "height": 10, "length": 30}],
    }
    body.update(overrides)
    return body


def address(country_id: int = 840, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "Ada Shipper",
        "company": "Shipper Inc",
        "address_1": "1 Main Street",
        "city": "New York",
        "province": "NY",
        "postal_code": "10001",
        "country_id": country_id,
        "email": "ada@example.com",
        "phone": "+1 212 555 0100",
        "classification": "business",
    }
    body.update(overrides)
    return body


def order_body(estimate_id: int, *, destination: int = 124, **overrides: Any) -> dict[str, Any]:
    order: dict[str, Any] = {
        "origin_address": address(840, export_code="EIN-1"),
        "destination_address": address(destination, city="Toronto", name="Bob Receiver"),
        "pickup_instructions": "Ring twice",
        "purpose_of_shipment_id": 1,
        "quote_estimate_id": estimate_id,
        "customer_reference": "cref-1",
        "description_of_contents": "Books",
        "hs_codes": [
            {"code": "4901.99", "cost": "60.25", "description": "Books", "quantity": 2,
             "weight": 1.0, "eccn": "EAR99", "country_id": 840},
        ],
    }  # fmt: skip
    order.update(overrides)
    return {"order": order}


@dataclass
class Reply:
    status: int
    text: str
    headers: Any

    @property
    def body(self) -> Any:
        return json.loads(self.text)


class Api:
    """Raw requests against a running sandbox, authenticated unless told otherwise."""

    def __init__(self, session: aiohttp.ClientSession, server: SandboxServer) -> None:
        self.session = session
        self.server = server

    def url(self, path: str) -> str:
        if path.startswith("/_sandbox"):
            return self.server.base_url.removesuffix("/client_api/v2") + path
        return self.server.base_url + path

    async def call(
        self, method: str, path: str, *, token: str | None = None, **kwargs: Any
    ) -> Reply:
        headers = dict(kwargs.pop("headers", {}))
        headers.setdefault("Authorization", f"Bearer {token or self.server.token}")
        async with self.session.request(method, self.url(path), headers=headers, **kwargs) as r:
            return Reply(r.status, await r.text(), r.headers)

    async def quote(self, **overrides: Any) -> dict[str, Any]:
        reply = await self.call("POST", "/quotes", json=quote_body(**overrides))
        assert reply.status == 201, reply.text
        body: dict[str, Any] = reply.body
        quote: dict[str, Any] = body.get("quote", body)
        return quote

    async def order(self, *, hub: bool = False, **overrides: Any) -> dict[str, Any]:
        """Quote then order the first estimate; hub orders go US -> DE through the hub."""
        destination = 276 if hub else 124
        quote = await self.quote(destination_country_id=destination, hub_transit=hub)
        estimate_id = quote["estimates"][0]["estimate_id"]
        body = order_body(estimate_id, destination=destination, **overrides)
        reply = await self.call("POST", "/orders", json=body)
        assert reply.status == 201, reply.text
        order: dict[str, Any] = reply.body["order"]
        return order
