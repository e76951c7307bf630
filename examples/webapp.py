"""A FastAPI app that ships orders: one shared client, bounded waits, exactly-once creation.

    pip install 'shipping-async' fastapi uvicorn
    SHIPPING_ACCESS_TOKEN=... SHIPPING_BASE_URL=... uvicorn examples.webapp:app

What it shows (README, "Inside a web app"):

- one ``AsyncShippingClient`` built from the environment in the lifespan, shared by every
  request (its order limiter keeps the account's 20 orders per 60 s);
- ``POST /shipments`` answers "busy, retry in N s" *before* queueing when the expected
  wait is longer than the app will wait, and bounds the wait with ``max_wait``;
- the order ledger makes ``customer_reference`` an idempotency key: a client retrying
  after a lost answer gets the same order back, never a second one;
- ``POST /shipments/{reference}/resolve``: the one call that settles an unknown outcome
  by hand;
- with ``WEBAPP_WEBHOOK_URL`` (the public URL of ``POST /webhooks``), the app owns a
  webhook: ``settle_from_webhooks`` makes its receiver feed ``order_received`` evidence
  into the ledger, so an unknown outcome settles itself and the caller's retry gets the
  order; every event (each hub leg's too) reaches ``on_event``;
- a cancelled request (the browser went away, a proxy timed out) never leaves the app
  guessing: ``on_cancelled_order`` hears what became of the order.
"""

from __future__ import annotations

import logging
import math
import os
from collections import deque
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from decimal import Decimal
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from shipping_async import (
    Address,
    AsyncShippingClient,
    CancelledOrder,
    EstimateExpiredError,
    OrderOutcomeUnknownError,
    OrderRequest,
    OrderWaitTimeoutError,
    Package,
    QuoteRequest,
    RateLimitError,
    RequestValidationError,
    SQLiteOrderLedger,
    settle_from_webhooks,
)
from shipping_async.webhooks import WebhookEvent, WebhookReceiver, ensure_webhook, legs_from

log = logging.getLogger("webapp")

#: Seconds (of the client's clock) a request may wait for an order permit.
MAX_WAIT = float(os.environ.get("WEBAPP_MAX_WAIT", "20"))
LEDGER = os.environ.get("WEBAPP_ORDER_LEDGER", "orders.ledger")
#: The public URL of this app's ``POST /webhooks`` (unset: no webhook, settle by hand).
WEBHOOK_URL = os.environ.get("WEBAPP_WEBHOOK_URL")


class Place(BaseModel):
    name: str
    address_1: str
    city: str
    country_id: int


class Parcel(BaseModel):
    weight: float = Field(gt=0)
    length: float = Field(gt=0)
    width: float = Field(gt=0)
    height: float = Field(gt=0)


class ShipmentIn(BaseModel):
    customer_reference: str = Field(min_length=1, max_length=100)
    sender: Place
    recipient: Place
    parcels: list[Parcel] = Field(min_length=1, max_length=50)
    value_of_goods: Decimal = Field(ge=0)
    currency: str = "USD"
    contents: str = "goods"
    pickup_instructions: str = ""
    hub_transit: bool = False


class Resolution(BaseModel):
    order_id: int | None


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    cancelled: list[CancelledOrder] = []
    events: deque[WebhookEvent] = deque(maxlen=10_000)

    async def on_event(event: WebhookEvent) -> None:
        """The app's own work for an event (raise to have the API deliver it again)."""
        events.append(event)

    async with AsyncExitStack() as stack:
        ledger = await SQLiteOrderLedger.open(LEDGER)
        stack.push_async_callback(ledger.aclose)
        client = await stack.enter_async_context(
            AsyncShippingClient(
                max_wait=MAX_WAIT, order_ledger=ledger, on_cancelled_order=cancelled.append
            )
        )
        app.state.client = client
        app.state.cancelled = cancelled
        app.state.events = events
        app.state.receiver = None
        if WEBHOOK_URL:
            known = os.environ.get("WEBAPP_WEBHOOK_ID")  # reuse it across restarts
            webhook = await ensure_webhook(
                client,
                WEBHOOK_URL,
                ["shipment.updated.status"],
                webhook_id=int(known) if known else None,
            )
            receiver = WebhookReceiver(on_event, token=webhook.token, legs=legs_from(client))
            stack.push_async_callback(receiver.close)
            # The one call: the ledger's unknowns settle from this receiver's evidence.
            await stack.enter_async_context(
                settle_from_webhooks(client, receiver, webhook_id=webhook.id)
            )
            app.state.receiver = receiver
        yield


app = FastAPI(lifespan=lifespan)


def _client(request: Request) -> AsyncShippingClient:
    client: AsyncShippingClient = request.app.state.client
    return client


def _busy(seconds: float | None, *, sent: bool = False) -> JSONResponse:
    retry = 1 if seconds is None else max(1, math.ceil(seconds))
    return JSONResponse(
        {"error": "busy: no order slot in time", "sent": sent, "retry_after": retry},
        status_code=503,
        headers={"Retry-After": str(retry)},
    )


@app.get("/shipments/wait")
async def expected_wait(request: Request) -> dict[str, Any]:
    """What a new shipment would wait for its order slot, without waiting."""
    client = _client(request)
    return {
        "expected_wait": client.orders.expected_wait(),
        "queued": client.order_limiter.queued(),
        "max_wait": MAX_WAIT,
    }


@app.post("/shipments", status_code=201)
async def ship(shipment: ShipmentIn, request: Request) -> Any:
    client = _client(request)
    # Tell the caller up front instead of holding the connection for nothing.
    expected = client.orders.expected_wait()
    if expected is not None and expected > MAX_WAIT:
        return _busy(expected)
    try:
        order = await _order(client, shipment)
    except OrderWaitTimeoutError as exc:
        return _busy(exc.expected_wait, sent=exc.sent)
    except OrderOutcomeUnknownError as exc:
        # Sent, no usable answer (or an earlier attempt's is unresolved): the order may
        # exist. The ledger refuses to send it again until it is resolved.
        return JSONResponse(
            {"error": "outcome unknown", "customer_reference": exc.customer_reference},
            status_code=502,
        )
    except RateLimitError as exc:
        return _busy(exc.retry_after or exc.window, sent=True)
    except RequestValidationError as exc:
        return JSONResponse({"error": "invalid", "problems": exc.problems}, status_code=422)
    return {"order_id": order.id, "customer_reference": order.customer_reference}


async def _order(client: AsyncShippingClient, shipment: ShipmentIn) -> Any:
    sender = Address(**shipment.sender.model_dump())
    recipient = Address(**shipment.recipient.model_dump())
    for _ in range(2):  # an estimate that expires while queued: quote once more
        quote = await client.quotes.create(
            QuoteRequest(
                origin_country_id=sender.country_id,
                destination_country_id=recipient.country_id,
                is_document=False,
                is_stackable=True,
                is_liftgate_required=False,
                is_shipment_protection_required=False,
                purpose_of_shipment_id=1,
                value_of_goods=shipment.value_of_goods,
                value_of_goods_currency_id=shipment.currency,
                mass_unit="kg",
                distance_unit="cm",
                packages=[Package(**parcel.model_dump()) for parcel in shipment.parcels],
                hub_transit=shipment.hub_transit,
            )
        )
        estimate = quote.cheapest(shipment.currency)
        try:
            return await client.orders.create(
                OrderRequest(
                    origin_address=sender,
                    destination_address=recipient,
                    quote_estimate_id=estimate.estimate_id,
                    purpose_of_shipment_id=1,
                    customer_reference=shipment.customer_reference,
                    description_of_contents=shipment.contents,
                    pickup_instructions=shipment.pickup_instructions,
                )
            )
        except EstimateExpiredError:
            log.info("estimate expired while queued; quoting %s again", shipment.customer_reference)
    raise OrderWaitTimeoutError(
        "the estimate expired twice while waiting",
        customer_reference=shipment.customer_reference,
        max_wait=MAX_WAIT,
        expected_wait=None,
    )


@app.post("/webhooks")
async def webhooks(request: Request) -> Response:
    """The API's deliveries: answered only after the ledger and ``on_event`` had them."""
    receiver: WebhookReceiver | None = request.app.state.receiver
    if receiver is None:
        return Response("no webhook configured", status_code=404)
    answer = await receiver.receive(request.stream(), request.headers)
    headers = {"Connection": "close"} if answer.close else None
    return Response(answer.text, status_code=answer.status, headers=headers)


@app.post("/shipments/{reference}/resolve")
async def resolve(reference: str, resolution: Resolution, request: Request) -> dict[str, Any]:
    """Settle an unknown outcome: the order found for it, or ``null`` for none."""
    order = await _client(request).orders.resolve(reference, order_id=resolution.order_id)
    return {"customer_reference": reference, "order_id": order.id if order else None}
