"""The README quickstart, runnable: one direct and one hub shipment against the sandbox.

    python examples/quickstart.py

Against the real API, drop the sandbox and build the client from the environment
(``SHIPPING_ACCESS_TOKEN``, ``SHIPPING_BASE_URL``): ``AsyncShippingClient()``.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal

from shipping_async import (
    Address,
    AsyncShippingClient,
    OrderRequest,
    Package,
    QuoteRequest,
    RollingWindowLimiter,
    choose_pickup_window,
)
from shipping_async.sandbox import SandboxServer

SENDER = Address(name="Shipping Desk", address_1="1200 Harbor Blvd", city="Oakland", country_id=840)
BERLIN = Address(name="Lena Fischer", address_1="Torstrasse 101", city="Berlin", country_id=276)
TORONTO = Address(
    name="Olivia Tremblay", address_1="450 Queen St W", city="Toronto", country_id=124
)


async def ship(client: AsyncShippingClient, to: Address, *, hub: bool, reference: str) -> str:
    quote = await client.quotes.create(
        QuoteRequest(
            origin_country_id=840,
            destination_country_id=to.country_id,
            hub_transit=hub,
            is_document=False,
            is_stackable=True,
            is_liftgate_required=False,
            is_shipment_protection_required=False,
            purpose_of_shipment_id=1,
            value_of_goods=Decimal("120.00"),
            value_of_goods_currency_id="USD",
            mass_unit="kg",
            distance_unit="cm",
            packages=[Package(weight=2.5, length=30, width=20, height=10)],
        )
    )
    estimate = quote.cheapest("USD")
    order = await client.orders.create(
        OrderRequest(
            origin_address=SENDER,
            destination_address=to,
            quote_estimate_id=estimate.estimate_id,
            purpose_of_shipment_id=1,
            customer_reference=reference,
            description_of_contents="Hiking boots",
            pickup_instructions="Loading dock",
        )
    )
    order = await client.orders.create_waybill(order.id)  # one waybill per leg
    slots = await client.orders.pickup_availabilities(order.id)  # first leg on a hub order
    window = choose_pickup_window(slots, now=client.clock.now())
    pickup = await client.orders.schedule_pickup(order.id, window.request)
    return (
        f"{reference}: order {order.id}, {len(order.legs)} leg(s), waybills {order.waybills}, "
        f"{estimate.total('USD')} USD, pickup {pickup.scheduled_date} {pickup.time_from}"
        f"-{pickup.time_to} #{pickup.confirmation_number or pickup.error_message}"
    )


async def main() -> None:
    # The sandbox runs 60x fast: its 60 s order window lasts 1 real second.
    async with (
        SandboxServer(speed=60, seed=1) as sandbox,
        AsyncShippingClient(
            sandbox.token,
            base_url=sandbox.base_url,
            clock=sandbox.clock,
            order_limiter=RollingWindowLimiter(20, 60.0, clock=sandbox.clock),
        ) as client,
    ):
        print(await ship(client, TORONTO, hub=False, reference="QS-DIRECT-1"))
        print(await ship(client, BERLIN, hub=True, reference="QS-HUB-1"))


if __name__ == "__main__":
    asyncio.run(main())
