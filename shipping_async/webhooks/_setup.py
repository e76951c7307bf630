"""Idempotent webhook set-up for deploy scripts: create it, or bring the existing one in line."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Literal, Protocol

import msgspec

from shipping_async.errors import NotFoundError
from shipping_async.models.webhooks import Webhook, WebhookStatus

__all__ = ["ensure_webhook"]

logger = logging.getLogger("shipping_async.webhooks")


class _Webhooks(Protocol):
    async def create(self, target_url: str, events: list[str], /) -> Webhook: ...

    async def get(self, webhook_id: int, /) -> Webhook: ...

    async def update(
        self,
        webhook_id: int,
        target_url: str,
        events: list[str],
        /,
        *,
        method: Literal["PUT", "PATCH"] = ...,
    ) -> Webhook: ...

    async def delete(self, webhook_id: int, /) -> object: ...


class _ClientWithWebhooks(Protocol):
    @property
    def webhooks(self) -> _Webhooks: ...


async def ensure_webhook(
    client: _ClientWithWebhooks,
    target_url: str,
    events: Iterable[str],
    *,
    webhook_id: int | None = None,
    recreate_if_failing: bool = False,
) -> Webhook:
    """Make sure a webhook sends ``events`` to ``target_url``; return it (with its token).

    ::

        webhook = await ensure_webhook(
            client, "https://example.com/hooks", ["shipment.updated.status"],
            webhook_id=settings.webhook_id,  # None on the first deploy
        )
        settings.webhook_id, settings.webhook_token = webhook.id, webhook.token

    - ``webhook_id`` given and found: returned as is when its URL and events already
      match (events compared as a set), else updated with PUT (the token stays the same).
    - ``webhook_id`` is ``None``, or no webhook has that id (404): a new one is created.

    The API has no endpoint listing webhooks, so the caller must keep the id (and the
    token, which the receiver needs) from the first run; without it every call creates
    another webhook. A ``failing`` webhook sends nothing and updating it does not
    reactivate it (section 3.2): it is logged, and with ``recreate_if_failing=True`` it
    is deleted and a new one created, which has a **new id and token** to store.
    """
    wanted = sorted(set(events))
    if not wanted:
        raise ValueError("events: at least one event name is required")
    if webhook_id is None:
        return await _create(client, target_url, wanted)
    try:
        current = await client.webhooks.get(webhook_id)
    except NotFoundError:
        logger.info("webhook %d not found; creating a new one for %s", webhook_id, target_url)
        return await _create(client, target_url, wanted)
    if current.status == WebhookStatus.FAILING:
        if recreate_if_failing:
            logger.warning("webhook %d is failing; replacing it with a new one", webhook_id)
            await client.webhooks.delete(webhook_id)
            return await _create(client, target_url, wanted)
        logger.warning(
            "webhook %d is failing and sends nothing; updating does not reactivate it "
            "(ask the account manager, or pass recreate_if_failing=True)",
            webhook_id,
        )
    if current.target_url == target_url and sorted(set(current.events)) == wanted:
        return current
    logger.info("updating webhook %d to %s for %s", webhook_id, target_url, ", ".join(wanted))
    updated = await client.webhooks.update(webhook_id, target_url, wanted, method="PUT")
    # The token never changes on update (section 4.10); keep it if the answer left it out.
    return updated if updated.token else msgspec.structs.replace(updated, token=current.token)


async def _create(client: _ClientWithWebhooks, target_url: str, events: list[str]) -> Webhook:
    webhook = await client.webhooks.create(target_url, events)
    logger.info("created webhook %d for %s", webhook.id, target_url)
    return webhook
