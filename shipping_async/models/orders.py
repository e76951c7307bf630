"""Orders, their legs (shipments), and the order request."""

from __future__ import annotations

from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any

import msgspec

from shipping_async.models._base import ApiTimestamp, Model
from shipping_async.models.addresses import Address, OrderAddress

__all__ = [
    "ClearanceDetail",
    "HSCode",
    "Order",
    "OrderDocument",
    "OrderRequest",
    "OrderStatus",
    "Shipment",
]


class OrderStatus(StrEnum):
    """The order statuses the spec names. Fields stay ``str``: a new status is kept as is."""

    INCOMPLETE = "incomplete"
    ORDER_RECEIVED = "order_received"
    AWAITING_ADDITIONAL_DOCUMENTATION = "awaiting_additional_documentation"
    AWAITING_PREPAYMENT = "awaiting_prepayment"
    AWAITING_WAYBILL_GENERATION = "awaiting_waybill_generation"
    AWAITING_SCHEDULE_PICKUP = "awaiting_schedule_pickup"
    AWAITING_PICKUP = "awaiting_pickup"
    AWAITING_SWAP_OUT = "awaiting_swap_out"
    PICKUP_MISSED = "pickup_missed"
    IN_TRANSIT = "in_transit"
    DELIVERED = "delivered"
    CANCELLED = "cancelled"


#: Statuses from which DELETE /orders/{id} cancels (section 3.1).
CANCELLABLE_STATUSES = frozenset(
    {
        OrderStatus.INCOMPLETE,
        OrderStatus.ORDER_RECEIVED,
        OrderStatus.AWAITING_ADDITIONAL_DOCUMENTATION,
        OrderStatus.AWAITING_PREPAYMENT,
        OrderStatus.AWAITING_WAYBILL_GENERATION,
        OrderStatus.AWAITING_SCHEDULE_PICKUP,
        OrderStatus.AWAITING_PICKUP,
        OrderStatus.AWAITING_SWAP_OUT,
        OrderStatus.PICKUP_MISSED,
    }
)


class OrderDocument(StrEnum):
    """Documents that can be uploaded with POST /orders (multipart)."""

    COMMERCIAL_INVOICE = "commercial_invoice"
    MATERIALS_SAFETY_DATA_SHEET = "materials_safety_data_sheet"


_NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]
_PositiveId = Annotated[int, msgspec.Meta(gt=0)]


class HSCode(Model):
    """One customs line of an order: ``cost`` is sent as decimal text."""

    code: _NonEmpty
    description: _NonEmpty
    quantity: Annotated[int, msgspec.Meta(gt=0)]
    cost: Decimal
    weight: Annotated[float, msgspec.Meta(gt=0, le=100_000)]
    country_id: Annotated[int, msgspec.Meta(gt=0, lt=1000)]
    eccn: str | None = None


class ClearanceDetail(Model):
    """Customs clearance details of an order."""

    reason_for_shipment_id: _PositiveId | None = None
    invoice_number: str | None = None
    purchase_order_number: str | None = None


class OrderRequest(Model):
    """The body of POST /orders (sent under ``order``)."""

    origin_address: Address
    destination_address: Address
    pickup_instructions: str
    purpose_of_shipment_id: _PositiveId
    quote_estimate_id: _PositiveId
    customer_reference: _NonEmpty
    description_of_contents: _NonEmpty
    hs_codes: list[HSCode] | None = None
    broker_address: Address | None = None
    importer_of_record_address: Address | None = None
    clearance_detail: ClearanceDetail | None = None


class Shipment(Model):
    """One leg of an order. Legs are in route order; no field names a leg's role."""

    shipping_service: str | None = None
    waybill: str | None = None
    waybill_document_link: str | None = None
    tracking_link: str | None = None
    status: str | None = None


class Order(Model):
    """An order. On a hub order read per-leg values from :attr:`legs`, not the top level.

    The top-level ``waybill``, ``waybill_document_link``, ``tracking_link`` and ``status``
    describe one leg only on a hub order (section 4.12).
    """

    id: int
    status: str = ""
    assigned_admin: str | None = None
    ccd_status: str | None = None
    created_at: ApiTimestamp | None = None
    customer_reference: str | None = None
    reference_number: str | None = None
    internal_transaction_number: str | None = None
    description_of_contents: str | None = None
    purpose_of_shipment_id: int | None = None
    quote_id: int | None = None
    company_id: int | None = None
    origin_address: OrderAddress | None = None
    destination_address: OrderAddress | None = None
    broker_address: OrderAddress | None = None
    importer_of_record_address: OrderAddress | None = None
    pickup_date: str | None = None
    pickup_instructions: str | None = None
    scheduled_pickup: Any = None
    date_delivered: str | None = None
    eei_eligible: bool | None = None
    send_consignee_tracking_details: bool | None = None
    value_of_goods: Decimal | None = None
    value_of_goods_currency: str | None = None
    measured_weight: Any = None
    invoice_data: Any = None
    invoice_number: str | None = None
    waybill: str | None = None
    tracking_link: str | None = None
    shipments: list[Shipment] = msgspec.field(default_factory=list)
    battery_declaration_link: str | None = None
    commercial_invoice_link: str | None = None
    customs_clearance_document_link: str | None = None
    draft_bill_of_lading_link: str | None = None
    eei_request_document_link: str | None = None
    export_permit_link: str | None = None
    final_bill_of_lading_link: str | None = None
    materials_safety_data_sheet_link: str | None = None
    packaging_list_link: str | None = None
    proof_of_delivery_link: str | None = None
    shippers_letter_of_instruction_link: str | None = None
    stream_packing_list_link: str | None = None
    waybill_document_link: str | None = None

    @property
    def legs(self) -> list[Shipment]:
        """The legs in route order: first leaves the origin, last reaches the destination."""
        return self.shipments

    @property
    def is_hub(self) -> bool:
        """True for a hub-transit order (two legs)."""
        return len(self.shipments) > 1

    @property
    def clearance_leg(self) -> Shipment | None:
        """The first leg (origin into the hub region, clears customs; the only leg of a
        direct order)."""
        return self.shipments[0] if self.shipments else None

    @property
    def local_leg(self) -> Shipment | None:
        """The last leg of a hub order (hub to destination); ``None`` on a direct order."""
        return self.shipments[-1] if self.is_hub else None

    @property
    def waybills(self) -> list[str | None]:
        """Each leg's waybill number, in route order."""
        return [leg.waybill for leg in self.shipments]

    @property
    def is_live(self) -> bool:
        """True once the order is in transit or delivered (it can no longer be cancelled)."""
        return self.status in (OrderStatus.IN_TRANSIT, OrderStatus.DELIVERED)

    @property
    def is_cancellable(self) -> bool:
        return self.status in CANCELLABLE_STATUSES


class _OrderEnvelope(Model):
    order: Order


class _SuccessBody(Model):
    success: bool = True
    error: str | None = None
    errors: list[Any] = msgspec.field(default_factory=list)
