"""``client.webhooks``: register, read, update and delete webhook endpoints."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal, Unpack

from shipping_async._decode import Answer
from shipping_async._http import RequestOptions, path_id
from shipping_async._retry import Operation
from shipping_async.models import Webhook, WebhookRequest, validate_request
from shipping_async.models.webhooks import _WebhookEnvelope
from shipping_async.resources._success import SUCCESS

if TYPE_CHECKING:
    from shipping_async._client import AsyncShippingClient

__all__ = ["Webhooks"]


def _webhook(envelope: _WebhookEnvelope) -> Webhook:
    return envelope.webhook


# A registration counts once its id and token are read: the token is what authenticates
# the deliveries, and without the id the endpoint cannot be changed or deleted.
_WEBHOOK = Answer(
    wire=_WebhookEnvelope,
    unwrap=_webhook,
    identity=(("webhook.id", "webhook.token"),),
    strip=("webhook",),
)


def _body(target_url: str, events: Iterable[str]) -> dict[str, WebhookRequest]:
    request = validate_request(WebhookRequest(target_url=target_url, events=list(events)))
    return {"webhook": request}


class Webhooks:
    """Webhook endpoints: the API POSTs order events to ``target_url``."""

    __slots__ = ("_client",)

    def __init__(self, client: AsyncShippingClient) -> None:
        self._client = client

    async def create(
        self, target_url: str, events: Iterable[str], **options: Unpack[RequestOptions]
    ) -> Webhook:
        """POST /webhooks. The returned ``token`` authenticates deliveries; keep it.

        Not re-sent after an ambiguous failure (a second registration would deliver every
        event twice): ``OutcomeUnknownError`` says so.
        """
        operation = Operation(name="create_webhook", method="POST", path="/webhooks")
        return await self._client._request(
            operation, _WEBHOOK, body=_body(target_url, events), **options
        )

    async def get(self, webhook_id: int, **options: Unpack[RequestOptions]) -> Webhook:
        """GET /webhooks/{id}."""
        path = f"/webhooks/{path_id(webhook_id, 'webhook_id')}"
        operation = Operation(name="get_webhook", method="GET", path=path)
        return await self._client._request(operation, _WEBHOOK, **options)

    async def update(
        self,
        webhook_id: int,
        target_url: str,
        events: Iterable[str],
        *,
        method: Literal["PUT", "PATCH"] = "PUT",
        **options: Unpack[RequestOptions],
    ) -> Webhook:
        """PUT (or PATCH) /webhooks/{id}: both ``target_url`` and ``events`` are replaced.

        The token stays; a ``failing`` webhook is not reactivated by an update.
        """
        verb = method.upper()
        if verb not in ("PUT", "PATCH"):
            raise ValueError(f"method: must be 'PUT' or 'PATCH', got {method!r}")
        path = f"/webhooks/{path_id(webhook_id, 'webhook_id')}"
        operation = Operation(name="update_webhook", method=verb, path=path)
        return await self._client._request(
            operation, _WEBHOOK, body=_body(target_url, events), **options
        )

    async def delete(self, webhook_id: int, **options: Unpack[RequestOptions]) -> None:
        """DELETE /webhooks/{id}. ``NotFoundError`` when there is no such endpoint."""
        path = f"/webhooks/{path_id(webhook_id, 'webhook_id')}"
        operation = Operation(name="delete_webhook", method="DELETE", path=path)
        await self._client._request(operation, SUCCESS, **options)
