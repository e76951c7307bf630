"""Tests of ensure_webhook against the sandbox: create once, update only what differs."""

from __future__ import annotations

import logging

import pytest

from shipping_async._client import AsyncShippingClient
from shipping_async.errors import NotFoundError
from shipping_async.models.webhooks import EventType
from shipping_async.sandbox import SandboxServer
from shipping_async.webhooks import ensure_webhook

from .support import Endpoint, place_order

URL = "http://127.0.0.1:8080/webhooks"
STATUS = EventType.SHIPMENT_STATUS
WAYBILL = EventType.SHIPMENT_WAYBILL


def writes(sandbox: SandboxServer) -> list[tuple[str, str]]:
    """The webhook requests that change something, in the order the sandbox got them."""
    return [
        (record.method, record.path)
        for record in sandbox.control.requests()
        if record.path.startswith("/webhooks") and record.method != "GET"
    ]


async def test_without_an_id_a_webhook_is_created(
    sandbox: SandboxServer, client: AsyncShippingClient
) -> None:
    webhook = await ensure_webhook(client, URL, [STATUS])

    assert webhook.token
    assert (webhook.target_url, webhook.events, webhook.status) == (URL, [STATUS], "active")
    assert writes(sandbox) == [("POST", "/webhooks")]


async def test_matching_webhook_is_returned_untouched(
    sandbox: SandboxServer, client: AsyncShippingClient
) -> None:
    first = await ensure_webhook(client, URL, [STATUS, WAYBILL])

    again = await ensure_webhook(client, URL, [WAYBILL, STATUS, WAYBILL], webhook_id=first.id)

    assert (again.id, again.token) == (first.id, first.token)
    assert writes(sandbox) == [("POST", "/webhooks")]


@pytest.mark.parametrize(
    ("url", "events"),
    [
        pytest.param(URL, [STATUS, WAYBILL], id="events-differ"),
        pytest.param("http://127.0.0.1:9090/hooks", [STATUS], id="url-differs"),
    ],
)
async def test_differing_webhook_is_updated_in_place_keeping_its_token(
    sandbox: SandboxServer, client: AsyncShippingClient, url: str, events: list[str]
) -> None:
    first = await ensure_webhook(client, URL, [STATUS])

    updated = await ensure_webhook(client, url, events, webhook_id=first.id)

    assert (updated.id, updated.token) == (first.id, first.token)
    assert (updated.target_url, sorted(updated.events)) == (url, sorted(events))
    assert writes(sandbox) == [("POST", "/webhooks"), ("PUT", f"/webhooks/{first.id}")]
    stored = await client.webhooks.get(first.id)
    assert (stored.target_url, sorted(stored.events)) == (url, sorted(events))


async def test_unknown_id_creates_a_new_webhook(
    sandbox: SandboxServer, client: AsyncShippingClient
) -> None:
    webhook = await ensure_webhook(client, URL, [STATUS], webhook_id=424242)

    assert webhook.id != 424242
    assert (await client.webhooks.get(webhook.id)).target_url == URL


async def test_no_events_is_refused_before_any_request(
    sandbox: SandboxServer, client: AsyncShippingClient
) -> None:
    with pytest.raises(ValueError, match="events"):
        await ensure_webhook(client, URL, [])
    assert writes(sandbox) == []


async def failing_webhook_id(
    sandbox: SandboxServer, client: AsyncShippingClient, endpoint: Endpoint
) -> int:
    # The endpoint's socket is bound but not listening: every delivery is refused.
    webhook = await client.webhooks.create(endpoint.url, [STATUS])
    await place_order(client, hub=False)
    await sandbox.control.wait_for_deliveries()
    assert (await client.webhooks.get(webhook.id)).status == "failing"
    return webhook.id


async def test_failing_webhook_is_updated_but_stays_failing_and_says_so(
    sandbox: SandboxServer,
    client: AsyncShippingClient,
    endpoint: Endpoint,
    caplog: pytest.LogCaptureFixture,
) -> None:
    webhook_id = await failing_webhook_id(sandbox, client, endpoint)

    with caplog.at_level(logging.WARNING, logger="shipping_async.webhooks"):
        webhook = await ensure_webhook(client, URL, [STATUS], webhook_id=webhook_id)

    assert (webhook.id, webhook.target_url, webhook.status) == (webhook_id, URL, "failing")
    assert "failing" in caplog.text
    assert "recreate_if_failing" in caplog.text


async def test_failing_webhook_is_replaced_when_asked_with_a_new_id_and_token(
    sandbox: SandboxServer, client: AsyncShippingClient, endpoint: Endpoint
) -> None:
    webhook_id = await failing_webhook_id(sandbox, client, endpoint)
    old_token = (await client.webhooks.get(webhook_id)).token

    webhook = await ensure_webhook(
        client, endpoint.url, [STATUS], webhook_id=webhook_id, recreate_if_failing=True
    )

    assert webhook.id != webhook_id
    assert webhook.token != old_token
    assert webhook.status == "active"
    with pytest.raises(NotFoundError):
        await client.webhooks.get(webhook_id)
