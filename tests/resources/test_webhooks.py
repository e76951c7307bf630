"""client.webhooks: registration, reads, PUT/PATCH updates, deletion and their errors."""

from __future__ import annotations

import aiohttp
import pytest
from aioresponses import aioresponses

from shipping_async._client import AsyncShippingClient
from shipping_async.errors import (
    NotFoundError,
    OutcomeUnknownError,
    RequestValidationError,
    UnprocessableEntityError,
)
from shipping_async.models import EventType, WebhookStatus

from .support import BASE_URL, SUCCESS, TOKEN, calls, sent_headers, sent_json, webhook

WEBHOOKS = BASE_URL + "/webhooks"
TARGET = "https://hooks.example.test/shipping"


async def test_create_sends_target_and_events_under_webhook(
    client: AsyncShippingClient, mock: aioresponses
) -> None:
    mock.post(WEBHOOKS, status=201, payload={"webhook": webhook()})

    created = await client.webhooks.create(TARGET, [EventType.SHIPMENT_STATUS])

    assert sent_json(mock, "POST", "/webhooks") == {
        "webhook": {"target_url": TARGET, "events": ["shipment.updated.status"]}
    }
    assert sent_headers(mock, "POST", "/webhooks")["Authorization"] == f"Bearer {TOKEN}"
    assert (created.id, created.token, created.status) == (77, "whk_token_abc", "active")
    assert "whk_token_abc" not in repr(created)


async def test_get_decodes_a_failing_webhook(
    client: AsyncShippingClient, mock: aioresponses
) -> None:
    mock.get(WEBHOOKS + "/77", payload={"webhook": webhook(status="failing", extra=1)})

    got = await client.webhooks.get(77)

    assert got.status == WebhookStatus.FAILING


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
async def test_update_replaces_target_and_events_with_the_chosen_method(
    client: AsyncShippingClient, mock: aioresponses, method: str
) -> None:
    events = ["shipment.updated.status", "shipment.updated.waybill"]
    mock.add(WEBHOOKS + "/77", method, payload={"webhook": webhook(events=events)})

    updated = await client.webhooks.update(
        77,
        "https://new.example.test/hook",
        events,
        method=method,  # type: ignore[arg-type]
    )

    assert sent_json(mock, method, "/webhooks/77") == {
        "webhook": {"target_url": "https://new.example.test/hook", "events": events}
    }
    assert updated.events == events


async def test_update_refuses_other_methods(client: AsyncShippingClient) -> None:
    with pytest.raises(ValueError, match="PUT"):
        await client.webhooks.update(77, TARGET, ["x"], method="POST")  # type: ignore[arg-type]


async def test_delete_returns_none(client: AsyncShippingClient, mock: aioresponses) -> None:
    mock.delete(WEBHOOKS + "/77", payload=SUCCESS)

    assert await client.webhooks.delete(77) is None
    assert calls(mock, "DELETE", "/webhooks/77") == 1


async def test_delete_of_a_missing_webhook_raises_not_found(
    client: AsyncShippingClient, mock: aioresponses
) -> None:
    text = "Couldn't find WebhookEndpoint with 'id'=5"
    mock.delete(
        WEBHOOKS + "/5", status=404, payload={"success": False, "error": text, "errors": []}
    )

    with pytest.raises(NotFoundError, match="WebhookEndpoint"):
        await client.webhooks.delete(5)


async def test_an_invalid_event_name_raises_422_with_the_messages(
    client: AsyncShippingClient, mock: aioresponses
) -> None:
    error = '["Events shipment.lost are not permitted"]'
    mock.post(WEBHOOKS, status=422, payload={"success": False, "error": error, "errors": []})

    with pytest.raises(UnprocessableEntityError) as caught:
        await client.webhooks.create(TARGET, ["shipment.lost"])

    assert caught.value.messages == ["Events shipment.lost are not permitted"]


async def test_no_events_is_refused_before_sending(
    client: AsyncShippingClient, mock: aioresponses
) -> None:
    with pytest.raises(RequestValidationError) as caught:
        await client.webhooks.create(TARGET, [])

    assert caught.value.field == "events"
    assert calls(mock, "POST", "/webhooks") == 0


async def test_registration_is_not_re_sent_after_a_dropped_connection(
    client: AsyncShippingClient, mock: aioresponses
) -> None:
    mock.post(WEBHOOKS, exception=aiohttp.ServerDisconnectedError())
    mock.post(WEBHOOKS, status=201, payload={"webhook": webhook()})

    with pytest.raises(OutcomeUnknownError) as caught:
        await client.webhooks.create(TARGET, ["shipment.updated.status"])

    assert caught.value.operation == "create_webhook"
    assert calls(mock, "POST", "/webhooks") == 1


async def test_an_update_is_retried_after_a_dropped_connection(
    client: AsyncShippingClient, mock: aioresponses
) -> None:
    mock.put(WEBHOOKS + "/77", exception=aiohttp.ServerDisconnectedError())
    mock.put(WEBHOOKS + "/77", payload={"webhook": webhook()})

    await client.webhooks.update(77, TARGET, ["shipment.updated.status"])

    assert calls(mock, "PUT", "/webhooks/77") == 2
