"""Receive the API's webhook deliveries in a FastAPI app, through the framework-neutral entry.

    pip install fastapi uvicorn
    SHIPPING_ACCESS_TOKEN=... SHIPPING_WEBHOOK_TOKEN=... uvicorn examples.fastapi_receiver:app

``WebhookReceiver.receive`` takes the raw body (Starlette's chunk stream, read within the
receiver's size and time bounds) and the headers, runs the handler, and says what to
answer: 200 once the handler returned, 500 when it failed (the API retries it), 4xx for
a delivery that is not the API's. Each hub leg's event reaches the handler, identical
bodies included, because ``legs_from(client)`` counts the order's legs.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from fastapi import FastAPI, Request, Response

from shipping_async import AsyncShippingClient
from shipping_async.webhooks import WebhookEvent, WebhookHandler, WebhookReceiver, legs_from


async def print_event(event: WebhookEvent) -> None:
    """The app's own work for one event; raise to have the API deliver it again."""
    print(event.object_id, event.event_type, event.updated_value)


def create_app(
    *,
    client: AsyncShippingClient | None = None,
    webhook_token: str | None = None,
    handler: WebhookHandler = print_event,
) -> FastAPI:
    """The app; without arguments the client and the token come from the environment."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            api = client
            if api is None:
                api = AsyncShippingClient()
                await stack.enter_async_context(api)
            receiver = WebhookReceiver(
                handler,
                token=webhook_token or os.environ["SHIPPING_WEBHOOK_TOKEN"],
                legs=legs_from(api),
            )
            app.state.receiver = receiver
            yield
            await receiver.close()  # running handlers get their grace, then are cancelled

    app = FastAPI(lifespan=lifespan)

    @app.post("/webhooks")
    async def webhooks(request: Request) -> Response:
        receiver: WebhookReceiver = request.app.state.receiver
        answer = await receiver.receive(request.stream(), request.headers, remote=_peer(request))
        headers = {"Connection": "close"} if answer.close else None
        return Response(answer.text, status_code=answer.status, headers=headers)

    return app


def _peer(request: Request) -> str | None:
    return request.client.host if request.client else None


app = create_app()
