"""Receive webhook deliveries: parsing, the receiver (any framework, or aiohttp), legs, set-up.

::

    from shipping_async.webhooks import (
        WebhookReceiver, create_webhook_app, ensure_webhook, legs_from, webhook_socket,
    )

    webhook = await ensure_webhook(client, "https://example.com/webhooks",
                                   ["shipment.updated.status"], webhook_id=known_id)

    async def on_event(event: WebhookEvent) -> None:   # raise to have the API retry it
        ...

    # aiohttp:
    app = create_webhook_app(on_event, token=webhook.token, legs=legs_from(client))
    web.run_app(app, sock=webhook_socket("0.0.0.0", 8080))

    # any other framework: raw body (or its chunk stream) and headers in, an answer out
    receiver = WebhookReceiver(on_event, token=webhook.token, legs=legs_from(client))
    answer = await receiver.receive(request.stream(), request.headers)
"""

from shipping_async.models.webhooks import EventType, Webhook, WebhookEvent
from shipping_async.webhooks._app import (
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_RECEIVE_BUFFER,
    WEBHOOK_RECEIVER,
    ReceiverOptions,
    add_webhook_route,
    create_webhook_app,
    webhook_socket,
)
from shipping_async.webhooks._dedupe import (
    DEDUPE_BYTES_PER_EVENT,
    DEFAULT_DEDUPE_SIZE,
    EventDeduplicator,
    event_key,
)
from shipping_async.webhooks._errors import (
    WebhookError,
    WebhookPayloadError,
    WebhookTimeoutError,
    WebhookTokenError,
    WebhookTooLargeError,
)
from shipping_async.webhooks._legs import LegMatch, find_moved_leg, legs_from, match_leg
from shipping_async.webhooks._parse import (
    DEFAULT_MAX_BODY_SIZE,
    MIN_FRESHNESS_WINDOW,
    parse_event,
)
from shipping_async.webhooks._receiver import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HANDLER_TIMEOUT,
    DEFAULT_MAX_CONCURRENT_READS,
    LegCounter,
    ReceiverStats,
    WebhookAnswer,
    WebhookHandler,
    WebhookReceiver,
)
from shipping_async.webhooks._setup import ensure_webhook

__all__ = [
    "DEDUPE_BYTES_PER_EVENT",
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_DEDUPE_SIZE",
    "DEFAULT_HANDLER_TIMEOUT",
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_MAX_BODY_SIZE",
    "DEFAULT_MAX_CONCURRENT_READS",
    "DEFAULT_RECEIVE_BUFFER",
    "MIN_FRESHNESS_WINDOW",
    "WEBHOOK_RECEIVER",
    "EventDeduplicator",
    "EventType",
    "LegCounter",
    "LegMatch",
    "ReceiverOptions",
    "ReceiverStats",
    "Webhook",
    "WebhookAnswer",
    "WebhookError",
    "WebhookEvent",
    "WebhookHandler",
    "WebhookPayloadError",
    "WebhookReceiver",
    "WebhookTimeoutError",
    "WebhookTokenError",
    "WebhookTooLargeError",
    "add_webhook_route",
    "create_webhook_app",
    "ensure_webhook",
    "event_key",
    "find_moved_leg",
    "legs_from",
    "match_leg",
    "parse_event",
    "webhook_socket",
]
