"""The SDK against the in-process sandbox: both flows, every error, the limiter, faults.

The sandbox runs ``SPEED`` times faster than real time and reports rate windows in real
seconds (as a real server would), so the client runs on real time with an order limiter
whose window is the sandbox's 60 s scaled down. The request log proves what reached the
server: never an order created twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import aiohttp
import pytest

from shipping_async._client import AsyncShippingClient
from shipping_async.clock import SystemClock
from shipping_async.errors import (
    APIResponseValidationError,
    AuthenticationError,
    BadRequestError,
    InternalServerError,
    NoHubForRouteError,
    NotFoundError,
    OrderAlreadyLiveError,
    OrderOutcomeUnknownError,
    UnprocessableEntityError,
)
from shipping_async.limiter import RollingWindowLimiter
from shipping_async.models import (
    Address,
    EventType,
    HSCode,
    Order,
    OrderRequest,
    Package,
    PickupWish,
    Quote,
    QuoteRequest,
    choose_pickup_window,
)
from shipping_async.sandbox import SandboxServer

SPEED = 100.0
TOKEN = "e2e-sandbox-token"
US, CANADA, GERMANY = 840, 124, 276


@pytest.fixture
async def sandbox() -> AsyncIterator[SandboxServer]:
    async with SandboxServer(token=TOKEN, speed=SPEED, seed=11) as server:
        yield server


def sdk(server: SandboxServer, **options: Any) -> AsyncShippingClient:
    options.setdefault("order_limiter", RollingWindowLimiter(20, 60.0 / SPEED))
    options.setdefault("timeout", 5.0)
    options.setdefault("base_url", server.base_url)
    return AsyncShippingClient(
        options.pop("token", server.token), retry_base_delay=0.01, retry_max_delay=0.05, **options
    )


def quote_request(destination: int = CANADA, *, hub: bool = False, **changes: Any) -> QuoteRequest:
    fields: dict[str, Any] = {
        "origin_country_id": US,
        "destination_country_id": destination,
        "is_document": False,
        "is_stackable": True,
        "is_liftgate_required": False,
        "purpose_of_shipment_id": 1,
        "is_shipment_protection_required": False,
        "value_of_goods": Decimal("120.50"),
        "value_of_goods_currency_id": "USD",
        "mass_unit": "kg",
        "distance_unit": "cm",
        "packages": [Package(weight=2, width=20, height=10, length=30)],
        "hub_transit": hub,
    }
    fields.update(changes)
    return QuoteRequest(**fields)


def order_request(estimate_id: int, reference: str, destination: int = CANADA) -> OrderRequest:
    return OrderRequest(
        origin_address=Address(
            name="Ada Shipper",
            address_1="1 Main Street",
            city="New York",
            country_id=US,
            postal_code="10001",
            export_code="EIN-1",
        ),
        destination_address=Address(
            name="Bob Receiver", address_1="2 Side Road", city="Elsewhere", country_id=destination
        ),
        pickup_instructions="Ring twice",
        purpose_of_shipment_id=1,
        quote_estimate_id=estimate_id,
        customer_reference=reference,
        description_of_contents="Books",
        hs_codes=[
            HSCode(
                code="4901.99",
                description="Books",
                quantity=2,
                cost=Decimal("60.25"),
                weight=1.0,
                country_id=US,
            )
        ],
    )


async def estimate_id(client: AsyncShippingClient, destination: int = CANADA) -> int:
    quote = await client.quotes.create(quote_request(destination))
    return quote.valid_estimates()[0].estimate_id


async def new_order(client: AsyncShippingClient, reference: str) -> Order:
    return await client.orders.create(order_request(await estimate_id(client), reference))


def created(server: SandboxServer, reference: str) -> list[int]:
    """Ids of the orders the sandbox created for ``reference``, from its request log."""
    return [
        record.order_id
        for record in server.control.requests(method="POST", path="/orders")
        if record.customer_reference == reference and record.order_id is not None
    ]


async def book_pickup(client: AsyncShippingClient, server: SandboxServer, order: Order) -> None:
    slots = await client.orders.pickup_availabilities(order.id)
    assert slots, "the sandbox offers business days ahead"
    # Two days ahead in the slot's zone: the same/next-day cut-off cannot interfere.
    local_today = server.clock.now().astimezone(ZoneInfo(slots[0].time_zone_id)).date()
    wish = PickupWish(earliest_date=local_today + timedelta(days=2))
    window = choose_pickup_window(slots, wish, now=server.clock.now())
    booked = await client.orders.schedule_pickup(order.id, window.request)
    assert not booked.rejected
    assert booked.scheduled_date == window.request.scheduled_date
    assert booked.time_from == window.request.time_from


# -- the flows -----------------------------------------------------------------------------


async def test_direct_flow_from_quote_to_pickup(sandbox: SandboxServer) -> None:
    async with sdk(sandbox) as client:
        quote = await client.quotes.create(quote_request(CANADA))
        assert not quote.hub_transit
        assert quote.estimates
        chosen = quote.valid_estimates()[0]
        assert chosen.total() > 0
        again = await client.quotes.get(quote.id)
        assert [e.estimate_id for e in again.estimates] == [e.estimate_id for e in quote.estimates]

        order = await client.orders.create(order_request(chosen.estimate_id, "direct-1"))
        assert order.status == "order_received"
        assert order.customer_reference == "direct-1"
        assert order.created_at is not None
        assert order.created_at.tzinfo is not None
        assert len(order.legs) == 1

        with_waybill = await client.orders.create_waybill(order.id)
        assert with_waybill.clearance_leg is not None
        assert with_waybill.clearance_leg.waybill

        await book_pickup(client, sandbox, order)
        tracked = await client.orders.get(order.id)

    assert tracked.status == "awaiting_pickup"
    assert created(sandbox, "direct-1") == [order.id]


async def test_hub_flow_from_quote_to_pickup(sandbox: SandboxServer) -> None:
    async with sdk(sandbox) as client:
        quote: Quote = await client.quotes.create(quote_request(GERMANY, hub=True))
        assert quote.hub_transit
        estimate = quote.valid_estimates()[0]

        order = await client.orders.create(
            order_request(estimate.estimate_id, "hub-1", destination=GERMANY)
        )
        assert order.is_hub
        assert len(order.legs) == 2

        with_waybills = await client.orders.create_waybill(order.id)
        assert with_waybills.clearance_leg is not None
        assert with_waybills.local_leg is not None
        waybills = with_waybills.waybills
        assert all(waybills)
        assert len(set(waybills)) == 2

        await book_pickup(client, sandbox, order)
        tracked = await client.orders.get(order.id)

    assert tracked.clearance_leg is not None
    assert tracked.clearance_leg.status == "awaiting_pickup"
    assert (
        len(sandbox.control.requests(method="POST", path=f"/orders/{order.id}/schedule_pickups"))
        == 1
    )


async def test_an_order_with_documents_goes_as_multipart(sandbox: SandboxServer) -> None:
    async with sdk(sandbox) as client:
        order = await client.orders.create(
            order_request(await estimate_id(client), "docs-1"),
            files={"commercial_invoice": ("invoice.pdf", b"%PDF-1.7 invoice", "application/pdf")},
        )
        assert order.commercial_invoice_link
        assert order.materials_safety_data_sheet_link == ""
        async with aiohttp.ClientSession() as http:
            headers = {"Authorization": f"Bearer {sandbox.token}"}
            async with http.get(order.commercial_invoice_link, headers=headers) as response:
                assert await response.read() == b"%PDF-1.7 invoice"


async def test_cancel_before_going_live(sandbox: SandboxServer) -> None:
    async with sdk(sandbox) as client:
        order = await new_order(client, "cancel-1")

        await client.orders.cancel(order.id)
        cancelled = await client.orders.get(order.id)

    assert cancelled.status == "cancelled"
    assert {leg.status for leg in cancelled.legs} == {"cancelled"}


async def test_cancel_after_going_live_raises_order_already_live(sandbox: SandboxServer) -> None:
    async with sdk(sandbox) as client:
        order = await new_order(client, "live-1")
        control = sandbox.base_url.removesuffix("/client_api/v2") + "/_sandbox"
        async with aiohttp.ClientSession() as http:
            response = await http.post(
                f"{control}/orders/{order.id}/status",
                json={"status": "in_transit"},
                headers={"Authorization": f"Bearer {sandbox.token}"},
            )
            assert response.status == 200

        with pytest.raises(OrderAlreadyLiveError):
            await client.orders.cancel(order.id)
        still = await client.orders.get(order.id)

    assert still.status == "in_transit"
    assert still.is_live


# -- every documented error ----------------------------------------------------------------


async def test_documented_errors_arrive_as_their_classes(sandbox: SandboxServer) -> None:
    async with sdk(sandbox) as client:
        with pytest.raises(BadRequestError) as bad:
            await client.quotes.create(quote_request(origin_country_id=999))
        assert bad.value.error == "Invalid input, object invalid"

        with pytest.raises(NoHubForRouteError) as no_hub:
            await client.quotes.create(quote_request(CANADA, hub=True))
        assert no_hub.value.messages == ["Hub transit No hub is available for this route."]

        with pytest.raises(BadRequestError):
            await client.orders.create(order_request(987654, "no-such-estimate"))

        with pytest.raises(NotFoundError):
            await client.orders.cancel(987654)

        with pytest.raises(NotFoundError):
            await client.webhooks.get(987654)

        with pytest.raises(UnprocessableEntityError) as events:
            await client.webhooks.create("https://hooks.example.test/x", ["shipment.lost"])
        assert events.value.messages

    async with sdk(sandbox, token="not-the-token") as stranger:
        with pytest.raises(AuthenticationError) as denied:
            await stranger.quotes.get(1)
    assert "not-the-token" not in str(denied.value)


async def test_a_pickup_outside_the_rules_is_a_bad_request(sandbox: SandboxServer) -> None:
    async with sdk(sandbox) as client:
        order = await new_order(client, "pickup-bad")
        await client.orders.create_waybill(order.id)
        slots = await client.orders.pickup_availabilities(order.id)
        window = choose_pickup_window(slots, now=sandbox.clock.now())
        early = type(window.request)(
            scheduled_date=window.request.scheduled_date,
            time_from=window.request.time_from.replace(hour=5),
            time_to=window.request.time_from.replace(hour=7),
        )

        with pytest.raises(BadRequestError):
            await client.orders.schedule_pickup(order.id, early)


async def test_webhooks_crud_through_the_sdk(sandbox: SandboxServer) -> None:
    async with sdk(sandbox) as client:
        hook = await client.webhooks.create(
            "https://hooks.example.test/a", [EventType.SHIPMENT_STATUS]
        )
        assert hook.status == "active"
        assert hook.token

        changed = await client.webhooks.update(
            hook.id,
            "https://hooks.example.test/b",
            [EventType.SHIPMENT_STATUS, EventType.SHIPMENT_WAYBILL],
            method="PATCH",
        )
        assert changed.target_url == "https://hooks.example.test/b"
        assert changed.token == hook.token
        assert (await client.webhooks.get(hook.id)).events == changed.events

        await client.webhooks.delete(hook.id)
        with pytest.raises(NotFoundError):
            await client.webhooks.get(hook.id)


# -- the rate limit ------------------------------------------------------------------------


async def test_the_limiter_learns_the_429_text_and_every_order_is_created_once() -> None:
    async with SandboxServer(token=TOKEN, speed=SPEED, seed=3, rate_limit=3) as server:
        limiter = RollingWindowLimiter(20, 60.0 / SPEED, clock=SystemClock())
        async with sdk(server, order_limiter=limiter) as client:
            estimate = await estimate_id(client)
            references = [f"burst-{index}" for index in range(5)]
            orders = await asyncio.gather(
                *(client.orders.create(order_request(estimate, ref)) for ref in references)
            )

        assert [order.customer_reference for order in orders] == references
        assert limiter.limit == 3  # learned from "3 of 3 in 0.6 seconds"
        refused = [
            r for r in server.control.requests(method="POST", path="/orders") if r.status == 429
        ]
        assert len(refused) >= 1
        for reference in references:
            assert len(created(server, reference)) == 1


# -- injected faults -----------------------------------------------------------------------


async def test_5xx_on_a_read_is_retried(sandbox: SandboxServer) -> None:
    async with sdk(sandbox) as client:
        order = await new_order(client, "read-5xx")
        sandbox.control.add_fault(
            "status", f"/orders/{order.id}", method="GET", status=503, count=2
        )

        got = await client.orders.get(order.id)

    assert got.id == order.id
    gets = sandbox.control.requests(method="GET", path=f"/orders/{order.id}")
    assert [record.status for record in gets] == [503, 503, 200]


async def test_5xx_on_create_order_is_raised_and_not_re_sent(sandbox: SandboxServer) -> None:
    async with sdk(sandbox) as client:
        estimate = await estimate_id(client)
        sandbox.control.add_fault("status", "/orders", method="POST", status=503)

        with pytest.raises(InternalServerError):
            await client.orders.create(order_request(estimate, "post-5xx"))

    assert len(sandbox.control.requests(method="POST", path="/orders")) == 1
    assert created(sandbox, "post-5xx") == []


@pytest.mark.parametrize(
    ("kind", "acted"),
    [
        pytest.param("drop_before", False, id="dropped-before-processing"),
        pytest.param("drop_after", True, id="dropped-after-creating"),
        pytest.param("malformed", True, id="answer-cut-in-half"),
    ],
)
async def test_an_ambiguous_order_failure_is_never_re_sent(
    sandbox: SandboxServer, kind: str, acted: bool
) -> None:
    async with sdk(sandbox) as client:
        estimate = await estimate_id(client)
        sandbox.control.add_fault(kind, "/orders", method="POST")  # type: ignore[arg-type]

        with pytest.raises(OrderOutcomeUnknownError) as caught:
            await client.orders.create(order_request(estimate, f"ambiguous-{kind}"))

    assert caught.value.customer_reference == f"ambiguous-{kind}"
    assert len(sandbox.control.requests(method="POST", path="/orders")) == 1
    assert len(created(sandbox, f"ambiguous-{kind}")) == (1 if acted else 0)


async def test_a_slow_order_times_out_as_unknown_and_is_not_re_sent(
    sandbox: SandboxServer,
) -> None:
    async with sdk(sandbox) as client:
        estimate = await estimate_id(client)
        sandbox.control.add_fault("delay", "/orders", method="POST", seconds=30)  # 0.3 s real

        with pytest.raises(OrderOutcomeUnknownError):
            await client.orders.create(order_request(estimate, "slow-1"), timeout=0.1)
        await asyncio.sleep(0.5)  # the server is done with the delayed request meanwhile

    assert len(sandbox.control.requests(method="POST", path="/orders")) == 1
    # The sandbox's delay fault waits before reading the body, so once the client has
    # given up it finds the connection gone and creates nothing; either way, not twice.
    assert len(created(sandbox, "slow-1")) <= 1


@pytest.mark.parametrize(
    ("kind", "options"),
    [
        pytest.param("drop_after", {}, id="dropped"),
        pytest.param("drop_before", {}, id="dropped-early"),
        pytest.param("delay", {"seconds": 30}, id="slow"),
    ],
)
async def test_a_read_survives_transport_faults(
    sandbox: SandboxServer, kind: str, options: dict[str, Any]
) -> None:
    async with sdk(sandbox) as client:
        order = await new_order(client, f"read-{kind}")
        path = f"/orders/{order.id}"
        sandbox.control.add_fault(kind, path, method="GET", **options)  # type: ignore[arg-type]

        got = await client.orders.get(order.id, timeout=0.1)

    assert got.id == order.id
    assert len(sandbox.control.requests(method="GET", path=path)) == 2


async def test_a_cut_answer_to_a_read_is_a_response_validation_error(
    sandbox: SandboxServer,
) -> None:
    async with sdk(sandbox) as client:
        order = await new_order(client, "read-malformed")
        sandbox.control.add_fault("malformed", f"/orders/{order.id}", method="GET")

        with pytest.raises(APIResponseValidationError):
            await client.orders.get(order.id)


class RefusingConnector(aiohttp.TCPConnector):
    """Refuses the next ``refusals`` connections, the way a down host does: before a byte
    of the request is written."""

    def __init__(self) -> None:
        super().__init__(force_close=True)  # a fresh connection per request
        self.refusals = 0

    async def _create_connection(self, req: Any, *args: Any) -> Any:
        if self.refusals > 0:
            self.refusals -= 1
            raise aiohttp.ClientConnectorError(
                req.connection_key, ConnectionRefusedError(111, "refused")
            )
        return await super()._create_connection(req, *args)


async def test_an_order_is_re_sent_when_the_connection_never_opened(
    sandbox: SandboxServer,
) -> None:
    connector = RefusingConnector()
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        sdk(sandbox, session=session) as client,
    ):
        estimate = await estimate_id(client)
        connector.refusals = 2

        order = await client.orders.create(order_request(estimate, "connect-1"))

    assert connector.refusals == 0
    assert created(sandbox, "connect-1") == [order.id]
    assert len(sandbox.control.requests(method="POST", path="/orders")) == 1
