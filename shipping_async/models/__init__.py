"""msgspec models of every resource of the API, and of the requests sent to it."""

from shipping_async.models._base import (
    ApiTimestamp,
    ClockTime,
    DayMonthYear,
    HourMinute,
    Model,
    decoder,
    validate_request,
)
from shipping_async.models.addresses import Address, Country, OrderAddress, TaxesAndDutiesConfig
from shipping_async.models.orders import (
    ClearanceDetail,
    HSCode,
    Order,
    OrderDocument,
    OrderRequest,
    OrderStatus,
    Shipment,
)
from shipping_async.models.pickups import (
    PickupAvailability,
    PickupWindow,
    PickupWish,
    ScheduledPickup,
    SchedulePickupRequest,
    choose_pickup_window,
)
from shipping_async.models.quotes import (
    BillableWeight,
    Estimate,
    LineItem,
    Package,
    Quote,
    QuoteRequest,
    WeightBreakdown,
)
from shipping_async.models.webhooks import (
    EventType,
    Webhook,
    WebhookEvent,
    WebhookRequest,
    WebhookStatus,
)

__all__ = [
    "Address",
    "ApiTimestamp",
    "BillableWeight",
    "ClearanceDetail",
    "ClockTime",
    "Country",
    "DayMonthYear",
    "Estimate",
    "EventType",
    "HSCode",
    "HourMinute",
    "LineItem",
    "Model",
    "Order",
    "OrderAddress",
    "OrderDocument",
    "OrderRequest",
    "OrderStatus",
    "Package",
    "PickupAvailability",
    "PickupWindow",
    "PickupWish",
    "Quote",
    "QuoteRequest",
    "SchedulePickupRequest",
    "ScheduledPickup",
    "Shipment",
    "TaxesAndDutiesConfig",
    "Webhook",
    "WebhookEvent",
    "WebhookRequest",
    "WebhookStatus",
    "WeightBreakdown",
    "choose_pickup_window",
    "decoder",
    "validate_request",
]
