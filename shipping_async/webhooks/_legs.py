"""Which leg of a hub order an event is about, read from the order's ``shipments[]``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import msgspec

from shipping_async.models.orders import Order, Shipment
from shipping_async.models.webhooks import EventType, WebhookEvent

__all__ = ["LegMatch", "find_moved_leg", "legs_from", "match_leg"]


class _Orders(Protocol):
    async def get(self, order_id: int, /) -> Order: ...


class _ClientWithOrders(Protocol):
    @property
    def orders(self) -> _Orders: ...


# The event carries no leg field (section 6): each event type names the leg field whose
# value it reports, and the leg is found by comparing that field across the legs.
_LEG_FIELD: dict[str, str] = {
    EventType.SHIPMENT_STATUS: "status",
    EventType.SHIPMENT_WAYBILL: "waybill",
}


class LegMatch(msgspec.Struct, frozen=True, kw_only=True):
    """The legs of ``order`` whose current value equals the event's ``updated_value``.

    - exactly one candidate: :attr:`index` and :attr:`shipment` name the leg that moved;
    - none (:attr:`found` is False): the order has moved on since the event, read it again
      after the next event or poll it;
    - several (:attr:`ambiguous`): the legs hold the same value (both ``in_transit``);
      the order alone cannot tell which one moved, keep your own record of each leg.
    """

    order: Order
    event: WebhookEvent
    candidates: tuple[int, ...]

    @property
    def found(self) -> bool:
        """True when exactly one leg matches."""
        return len(self.candidates) == 1

    @property
    def ambiguous(self) -> bool:
        """True when more than one leg holds the event's value."""
        return len(self.candidates) > 1

    @property
    def index(self) -> int | None:
        """The moved leg's position in route order (0 leaves the origin), if unique."""
        return self.candidates[0] if self.found else None

    @property
    def shipment(self) -> Shipment | None:
        """The moved leg, if unique."""
        return self.order.shipments[self.candidates[0]] if self.found else None

    @property
    def is_last_leg(self) -> bool:
        """True when the moved leg is the one into the destination (the only leg if direct)."""
        return self.found and self.candidates[0] == len(self.order.shipments) - 1


def match_leg(order: Order, event: WebhookEvent) -> LegMatch:
    """Compare ``order.shipments[]`` with ``event``: status events by ``status``, waybill
    events by ``waybill``.

    ::

        match = match_leg(order, event)
        if match.found:
            print(f"leg {match.index} is now {event.updated_value}")

    Raises ``ValueError`` when the event is not about this order or is of an event type
    that names no leg field.
    """
    if event.object_id != order.id:
        raise ValueError(f"event is about order {event.object_id}, not order {order.id}")
    field = _LEG_FIELD.get(event.event_type)
    if field is None:
        raise ValueError(
            f"event type {event.event_type!r} names no leg field; "
            f"known types: {', '.join(sorted(_LEG_FIELD))}"
        )
    candidates = tuple(
        index
        for index, leg in enumerate(order.shipments)
        if getattr(leg, field) == event.updated_value
    )
    return LegMatch(order=order, event=event, candidates=candidates)


async def find_moved_leg(client: _ClientWithOrders, event: WebhookEvent) -> LegMatch:
    """Read the event's order (``GET /orders/{id}``) and say which leg moved.

    ::

        async def on_event(event: WebhookEvent) -> None:
            match = await find_moved_leg(client, event)
            if match.found and match.is_last_leg and event.updated_value == "delivered":
                ...

    The order is read after the event, so a later change may already show: a match says
    which leg holds the event's value *now*. Events that arrive out of order (retries)
    are best applied by comparing ``updated_at_utc`` with what you already stored.
    """
    order = await client.orders.get(event.object_id)
    return match_leg(order, event)


def legs_from(client: _ClientWithOrders) -> Callable[[WebhookEvent], Awaitable[int]]:
    """The receiver's ``legs``: how many legs of the event's order hold its value now.

    ::

        receiver = WebhookReceiver(on_event, token=webhook.token, legs=legs_from(client))

    The two legs of a hub order fire byte-identical events (both become
    ``order_received`` in the same millisecond), and the body names no leg (section 6).
    When such a body comes again, the receiver asks this how many legs may have sent it:
    the order is read (``GET /orders/{id}``) and its ``shipments[]`` compared with the
    event, as :func:`match_leg` does. An event type that names no leg field counts 1.
    Only repeated bodies cost a lookup; a retry of a direct order's event still reads 1.
    """

    async def count(event: WebhookEvent) -> int:
        order = await client.orders.get(event.object_id)
        if event.event_type not in _LEG_FIELD:
            return 1
        return len(match_leg(order, event).candidates)

    return count
