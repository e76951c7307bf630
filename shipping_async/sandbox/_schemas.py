"""Strict request bodies: every struct forbids unknown fields, so an SDK typo fails loudly.

Types follow the spec to the letter (``value_of_goods`` is decimal text, ids are integers).
Optional fields accept an explicit ``null`` as "absent". Rules that a type cannot express
(known country ids, positive dimensions, ...) are checked by the handlers.
"""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = [
    "ClearanceDetail",
    "FaultRequest",
    "HsCode",
    "OrderAddress",
    "OrderBody",
    "OrderRequest",
    "Package",
    "QuoteAddress",
    "QuoteRequest",
    "ScheduledPickupBody",
    "ScheduledPickupRequest",
    "StatusChangeRequest",
    "WebhookBody",
    "WebhookRequest",
]


class _Strict(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    pass


class Package(_Strict):
    """A package of a quote request (spec 2.3), in the request's units."""

    weight: float
    width: float
    height: float
    length: float


class QuoteAddress(_Strict):
    """An address in a quote request (spec 2.4); ``import_code``/``export_code`` are for
    orders only and are refused here."""

    name: str | None = None
    company: str | None = None
    address_1: str | None = None
    address_2: str | None = None
    city: str | None = None
    province: str | None = None
    postal_code: str | None = None
    country_id: int | None = None
    email: str | None = None
    phone: str | None = None
    classification: str | None = None


class QuoteRequest(_Strict):
    """POST /quotes (spec 4.1)."""

    origin_country_id: int
    destination_country_id: int
    is_document: bool
    is_stackable: bool
    is_liftgate_required: bool
    purpose_of_shipment_id: int
    is_shipment_protection_required: bool
    value_of_goods: str
    value_of_goods_currency_id: str
    mass_unit: Literal["kg", "lb"]
    distance_unit: Literal["cm", "inch"]
    packages: list[Package]
    origin_address: QuoteAddress | None = None
    destination_address: QuoteAddress | None = None
    hub_transit: bool = False


class OrderAddress(_Strict):
    """An address in an order request: ``name``, ``address_1``, ``city`` and ``country_id``
    are required (the spec does not say which are; this is the sandbox's choice)."""

    name: str
    address_1: str
    city: str
    country_id: int
    company: str | None = None
    address_2: str | None = None
    province: str | None = None
    postal_code: str | None = None
    email: str | None = None
    phone: str | None = None
    classification: str | None = None
    import_code: str | None = None
    export_code: str | None = None


class HsCode(_Strict):
    """An HS code line of an order (spec 2.5); ``code``, ``description``, ``cost`` and
    ``quantity`` are required."""

    code: str
    description: str
    cost: str
    quantity: int
    weight: float | None = None
    eccn: str | None = None
    country_id: int | None = None


class ClearanceDetail(_Strict):
    """``order.clearance_detail`` (spec 4.3)."""

    reason_for_shipment_id: int | None = None
    invoice_number: str | None = None
    purchase_order_number: str | None = None


class OrderBody(_Strict):
    """The fields under ``order`` of POST /orders (spec 4.3)."""

    origin_address: OrderAddress
    destination_address: OrderAddress
    pickup_instructions: str
    purpose_of_shipment_id: int
    quote_estimate_id: int
    customer_reference: str
    description_of_contents: str
    hs_codes: list[HsCode] | None = None
    broker_address: OrderAddress | None = None
    importer_of_record_address: OrderAddress | None = None
    clearance_detail: ClearanceDetail | None = None


class OrderRequest(_Strict):
    """POST /orders: ``{"order": {...}}``."""

    order: OrderBody


class ScheduledPickupBody(_Strict):
    """The fields under ``scheduled_pickup`` (spec 4.6)."""

    time_from: str
    time_to: str
    scheduled_date: str


class ScheduledPickupRequest(_Strict):
    """POST /orders/{id}/schedule_pickups: ``{"scheduled_pickup": {...}}``."""

    scheduled_pickup: ScheduledPickupBody


class WebhookBody(_Strict):
    """The fields under ``webhook`` (spec 4.8)."""

    target_url: str
    events: list[str]


class WebhookRequest(_Strict):
    """POST /webhooks and PUT/PATCH /webhooks/{id}: ``{"webhook": {...}}``."""

    webhook: WebhookBody


class StatusChangeRequest(_Strict):
    """Control API: POST /_sandbox/orders/{id}/status."""

    status: str
    leg: int | None = None


FaultKind = Literal[
    "status",
    "status_after",
    "delay",
    "delay_after",
    "drop_before",
    "drop_after",
    "malformed",
    "carrier_rejection",
]


class FaultRequest(_Strict):
    """Control API: POST /_sandbox/faults (see :mod:`shipping_async.sandbox._faults`)."""

    kind: FaultKind
    path: str
    method: str = "*"
    count: int = 1
    status: int | None = None
    seconds: float | None = None
    message: str | None = None
