"""The sandbox's stateful store: quotes, estimates, orders and their legs, webhooks.

One :class:`Store` per sandbox (a reset replaces it). Ids, tokens, waybills and
confirmation numbers come from one ``random.Random(seed)``, so a seeded sandbox replays the
same values; each kind of id starts at a random base and then counts up by one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal

from shipping_async.sandbox._config import HubLane
from shipping_async.sandbox._pricing import LineItem, Weights
from shipping_async.sandbox._schemas import OrderAddress, OrderBody

__all__ = [
    "ORDER_STATUSES",
    "PRE_PICKUP_STATUSES",
    "Document",
    "Estimate",
    "Leg",
    "Order",
    "Quote",
    "ScheduledPickup",
    "Store",
    "Webhook",
]

#: Every order status of spec 3.1, in the order the spec lists them.
ORDER_STATUSES = (
    "incomplete",
    "order_received",
    "awaiting_additional_documentation",
    "awaiting_prepayment",
    "awaiting_waybill_generation",
    "awaiting_schedule_pickup",
    "awaiting_pickup",
    "awaiting_swap_out",
    "pickup_missed",
    "in_transit",
    "delivered",
    "cancelled",
)
#: Statuses from which an order can still be cancelled (spec 3.1); the rest have "gone live".
PRE_PICKUP_STATUSES = frozenset(ORDER_STATUSES[: ORDER_STATUSES.index("in_transit")])
#: Statuses a waybill moves on to ``awaiting_schedule_pickup``.
PRE_WAYBILL_STATUSES = frozenset(
    {
        "incomplete",
        "order_received",
        "awaiting_additional_documentation",
        "awaiting_prepayment",
        "awaiting_waybill_generation",
    }
)


@dataclass(slots=True)
class LocalLeg:
    """The hub-to-destination leg of a hub estimate; never ordered directly."""

    estimate_id: int
    carrier: str
    service: str
    line_items: list[LineItem]


@dataclass(slots=True)
class Estimate:
    """One estimate; for a hub quote ``id`` is the clearance leg's estimate id."""

    id: int
    quote_id: int
    carrier: str
    service: str
    line_items: list[LineItem]
    weights: Weights
    local_leg: LocalLeg | None = None


@dataclass(slots=True)
class Quote:
    """A quote and the lane and goods it was priced for."""

    id: int
    created_at: float  # sandbox clock monotonic seconds
    origin_country_id: int
    destination_country_id: int
    value_of_goods: Decimal
    value_of_goods_currency: str
    estimates: list[Estimate]
    hub_lane: HubLane | None = None

    @property
    def hub_transit(self) -> bool:
        return self.hub_lane is not None


@dataclass(slots=True)
class Leg:
    """One shipment of an order (spec 2.6 Shipment)."""

    carrier: str
    shipping_service: str
    status: str
    clears_customs: bool
    waybill: str = ""
    waybill_document_link: str = ""
    tracking_link: str = ""


@dataclass(slots=True)
class Document:
    """An uploaded (or generated) document served under /_sandbox/documents."""

    id: str
    filename: str
    content_type: str
    content: bytes


@dataclass(slots=True)
class ScheduledPickup:
    """A scheduled pickup (spec 2.8); a carrier rejection keeps ``error_message``."""

    id: int
    order_id: int
    time_from: str
    time_to: str
    scheduled_date: str
    confirmation_number: str
    freight_confirmation_number: str
    error_message: str | None


@dataclass(slots=True)
class Order:
    """An order: the request it came from, its legs and what happened since."""

    id: int
    quote: Quote
    estimate: Estimate
    request: OrderBody
    created_at: datetime
    legs: list[Leg]
    address_ids: dict[str, int]
    reference_number: str
    company_id: int
    assigned_admin: str
    pickup_date: date
    internal_transaction_number: str = ""
    scheduled_pickup: str = ""
    date_delivered: datetime | None = None
    documents: dict[str, str] = field(default_factory=dict)  # link field -> URL

    @property
    def status(self) -> str:
        """The order's status: on a hub order, the first leg's (spec 4.12: one leg only)."""
        return self.legs[0].status

    def address(self, role: str) -> OrderAddress | None:
        """The request address for ``origin_address``, ``broker_address``, ..."""
        value = getattr(self.request, role)
        return value if isinstance(value, OrderAddress) else None


@dataclass(slots=True)
class Webhook:
    """A registered webhook endpoint (spec 2.9)."""

    id: int
    target_url: str
    events: list[str]
    token: str
    status: str = "active"


class Store:
    """Everything the sandbox remembers; replaced wholesale by a reset."""

    __slots__ = (
        "_next",
        "company_id",
        "documents",
        "estimates",
        "orders",
        "pickups",
        "quotes",
        "rng",
        "webhooks",
    )

    def __init__(self, seed: int | None) -> None:
        self.rng = random.Random(seed)
        rng = self.rng
        self._next = {
            "quote": rng.randrange(100_000, 900_000),
            "estimate": rng.randrange(1_000_000, 9_000_000),
            "order": rng.randrange(10_000, 90_000),
            "address": rng.randrange(200_000, 900_000),
            "pickup": rng.randrange(1_000, 9_000),
            "webhook": rng.randrange(100, 900),
        }
        self.company_id = rng.randrange(1_000, 9_999)
        self.quotes: dict[int, Quote] = {}
        self.estimates: dict[int, Estimate] = {}
        self.orders: dict[int, Order] = {}
        self.pickups: dict[int, ScheduledPickup] = {}
        self.webhooks: dict[int, Webhook] = {}
        self.documents: dict[str, Document] = {}

    def next_id(self, kind: str) -> int:
        """The next id of ``kind`` (quote, estimate, order, address, pickup, webhook)."""
        value = self._next[kind]
        self._next[kind] = value + 1
        return value

    def token(self, nbytes: int = 16) -> str:
        """A reproducible hex token (webhook tokens, document ids)."""
        return self.rng.randbytes(nbytes).hex()

    def digits(self, count: int) -> str:
        """A reproducible string of ``count`` decimal digits, not starting with 0."""
        return str(self.rng.randrange(10 ** (count - 1), 10**count))
