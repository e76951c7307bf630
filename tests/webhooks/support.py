"""Shared by the webhook tests: the documented delivery body and the helper types."""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from datetime import datetime
from decimal import Decimal
from typing import Any, Unpack

import msgspec
from aiohttp import web
from hypothesis import strategies as st

from shipping_async._client import AsyncShippingClient
from shipping_async.clock import Clock
from shipping_async.models import Address, Order, OrderRequest, Package, QuoteRequest
from shipping_async.webhooks import (
    ReceiverOptions,
    WebhookHandler,
    WebhookReceiver,
    add_webhook_route,
)

TOKEN = "whk_3f9a2c7e1b"

BodyFactory = Callable[..., bytes]
Serve = Callable[[web.Application], Awaitable[str]]


def event_fields(**overrides: Any) -> dict[str, Any]:
    """A documented delivery body (section 6) as a dict, with ``overrides`` applied."""
    fields: dict[str, Any] = {
        "object_type": "order",
        "object_id": 4201,
        "event_type": "shipment.updated.status",
        "original_value": "order_received",
        "updated_value": "in_transit",
        "updated_at_utc": "2026-01-05T09:00:00.123Z",
        "token": TOKEN,
    }
    fields.update(overrides)
    return fields


class Endpoint:
    """A receiver on a loopback socket bound up front: its URL exists before the webhook
    is registered, and the receiver (which needs the webhook's token) starts after.

    ``arrivals`` records each delivery's arrival on ``clock`` and the answer given;
    ``lose_answers`` turns the next that many answers into 500 after the receiver has
    accepted the event, as when an answer is lost on the way back.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/webhooks"
        self.arrivals: list[tuple[float, int]] = []
        self.lose_answers = 0
        self._runner: web.AppRunner | None = None

    @web.middleware
    async def _observe(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        response = await handler(request)
        self.arrivals.append((self._clock.monotonic(), response.status))
        if self.lose_answers > 0:
            self.lose_answers -= 1
            return web.Response(status=500)
        return response

    async def start(
        self, handler: WebhookHandler, *, token: str, **options: Unpack[ReceiverOptions]
    ) -> WebhookReceiver:
        app = web.Application(middlewares=[self._observe])
        receiver = add_webhook_route(app, handler, token=token, **options)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.SockSite(self._runner, self._sock).start()
        return receiver

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self._sock.close()


def address(country_id: int) -> Address:
    return Address(
        name="Ada Shipper", address_1="1 Main Street", city="Springfield",
        country_id=country_id, export_code="EIN-1",
    )  # fmt: skip


async def place_order(client: AsyncShippingClient, *, hub: bool) -> Order:
    """A US -> Germany order (through the Amsterdam hub when ``hub``), waybill not yet made."""
    quote = await client.quotes.create(
        QuoteRequest(
            origin_country_id=840, destination_country_id=276, is_document=False,
            is_stackable=True, is_liftgate_required=False, purpose_of_shipment_id=1,
            is_shipment_protection_required=False, value_of_goods=Decimal("120.00"),
            value_of_goods_currency_id="USD", mass_unit="kg", distance_unit="cm",
            packages=[Package(weight=2, width=20, height=10, length=30)], hub_transit=hub,
        )
    )  # fmt: skip
    return await client.orders.create(
        OrderRequest(
            origin_address=address(840), destination_address=address(276),
            pickup_instructions="Ring twice", purpose_of_shipment_id=1,
            quote_estimate_id=quote.estimates[0].estimate_id,
            customer_reference=f"webhooks-{quote.id}", description_of_contents="Books",
        )
    )  # fmt: skip


def with_raw(field: str, raw: bytes) -> bytes:
    """A documented body whose ``field`` string holds ``raw`` bytes as sent (not escaped)."""
    marker = "\u2603"
    body = msgspec.json.encode(event_fields(**{field: marker}))
    return body.replace(marker.encode(), raw)


_offsets = st.integers(-(23 * 60 + 59), 23 * 60 + 59).map(
    lambda minutes: f"{'+' if minutes >= 0 else '-'}{abs(minutes) // 60:02}:{abs(minutes) % 60:02}"
)
_timestamps = st.builds(
    lambda at, offset: at.isoformat(timespec="milliseconds") + offset,
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)),
    _offsets,
)
hostile_bodies = st.one_of(
    st.binary(max_size=512),
    st.builds(with_raw, st.sampled_from(sorted(event_fields())), st.binary(min_size=1, max_size=8)),
    st.builds(
        lambda opener, depth: b'{"pad":' + opener * depth,
        st.sampled_from([b"[", b'{"a":', b"[{", b'["x",']),
        st.integers(1, 40_000),
    ),
    _timestamps.map(lambda at: msgspec.json.encode(event_fields(updated_at_utc=at))),
)
