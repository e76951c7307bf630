"""A success is a success: odd fields are kept raw, only a lost identity is an unknown outcome."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import date, time
from typing import Any

import pytest
from aioresponses import aioresponses

from shipping_async._client import AsyncShippingClient
from shipping_async.errors import (
    APIResponseValidationError,
    ConfigurationError,
    InternalServerError,
    OrderOutcomeUnknownError,
    OutcomeUnknownError,
)
from shipping_async.models import SchedulePickupRequest, Undecoded

from .support import (
    BASE_URL,
    calls,
    direct_quote,
    estimate,
    hub_quote,
    make_client,
    order,
    order_request,
    pickup_availabilities,
    quote_request,
    scheduled_pickup,
    webhook,
)

ORDERS = BASE_URL + "/orders"
ORDER_7001 = ORDERS + "/7001"


@pytest.fixture
async def client() -> AsyncIterator[AsyncShippingClient]:
    """The SDK as users get it: lenient (the suite's default is strict, see conftest)."""
    async with make_client(decoding="lenient") as shipping:
        yield shipping


def window() -> SchedulePickupRequest:
    return SchedulePickupRequest(
        scheduled_date=date(2026, 1, 7), time_from=time(10), time_to=time(12)
    )


def paths(undecoded: tuple[Undecoded, ...]) -> list[str]:
    return [item.path for item in undecoded]


async def test_a_201_with_an_odd_created_at_returns_the_order_with_its_id(
    client: AsyncShippingClient, mock: aioresponses, caplog: pytest.LogCaptureFixture
) -> None:
    mock.post(ORDERS, status=201, payload={"order": order(created_at="string")})

    with caplog.at_level(logging.WARNING, logger="shipping_async"):
        created = await client.orders.create(order_request())

    assert created.id == 7001
    assert created.created_at is None
    assert created.undecoded == (
        Undecoded(
            path="created_at",
            value="string",
            reason="expected a time as YYYY/MM/DD HH:MM:SS UTC, got 'string'",
        ),
    )
    assert created.customer_reference == "PO-2026-0001"  # the rest decoded as usual
    assert calls(mock, "POST", "/orders") == 1
    assert "POST /orders: 1 field(s)" in caplog.text
    assert "created_at" in caplog.text


async def test_every_odd_field_is_reported_with_its_path_in_the_answer(
    client: AsyncShippingClient, mock: aioresponses
) -> None:
    body = order(hub=True, value_of_goods={"amount": 1}, quote_id="501")
    body["shipments"][1]["status"] = 3
    body["origin_address"]["country"]["id"] = "US"  # a required field: its object goes
    mock.get(ORDER_7001, payload={"order": body})

    found = await client.orders.get(7001)

    assert paths(found.undecoded) == [
        "quote_id",
        "origin_address.country",
        "value_of_goods",
        "shipments[1].status",
    ]
    assert found.undecoded[1].value["id"] == "US"
    assert found.origin_address is not None
    assert found.origin_address.country is None
    assert found.origin_address.city == "New York"
    assert found.waybills == ["WB-CLR-1", "WB-LOC-2"]
    assert found.shipments[1].status is None


async def test_an_estimate_that_cannot_be_read_is_dropped_and_kept_raw(
    client: AsyncShippingClient, mock: aioresponses
) -> None:
    quote = direct_quote()
    quote["estimates"] = [
        {**estimate(9001), "estimate_id": "x"},
        estimate(9002),
        estimate(9003, line_items="none"),
        estimate(9004),
    ]
    mock.get(BASE_URL + "/quotes/501", payload=quote)

    found = await client.quotes.get(501)

    assert [item.estimate_id for item in found.estimates] == [9002, 9003, 9004]
    # Paths name the items as the server sent them, before any was dropped.
    assert paths(found.undecoded) == ["estimates[0]", "estimates[2].line_items"]
    assert found.undecoded[0].value["shipping_company"] == "Carrier One"
    assert found.undecoded[0].reason == (
        "Object missing required field `estimate_id`; "
        "estimates[0].estimate_id: Expected `int`, got `str`"
    )
    assert found.estimates[1].line_items == []


async def test_paths_on_a_hub_quote_are_relative_to_the_quote(
    client: AsyncShippingClient, mock: aioresponses
) -> None:
    body = hub_quote()
    body["quote"]["estimates"].append(estimate(9102, quote_expired="no"))
    mock.post(BASE_URL + "/quotes", status=201, payload=body)

    found = await client.quotes.create(quote_request(hub_transit=True))

    assert found.id == 502
    assert paths(found.undecoded) == ["estimates[1].quote_expired"]


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param({"order": order(id="7001")}, id="id-as-text"),
        pytest.param({"order": order(id=None)}, id="id-null"),
        pytest.param({"order": "created"}, id="order-not-an-object"),
        pytest.param({"id": 7001}, id="no-order"),
    ],
)
async def test_a_201_without_a_readable_order_id_is_an_unknown_order_outcome(
    client: AsyncShippingClient, mock: aioresponses, answer: dict[str, Any]
) -> None:
    mock.post(ORDERS, status=201, payload=answer)
    mock.post(ORDERS, status=201, payload={"order": order()})  # a re-send would get this

    with pytest.raises(OrderOutcomeUnknownError) as caught:
        await client.orders.create(order_request())

    assert isinstance(caught.value, APIResponseValidationError)
    assert caught.value.status == 201
    assert caught.value.customer_reference == "PO-2026-0001"
    assert calls(mock, "POST", "/orders") == 1


async def test_strict_decoding_refuses_the_odd_field_as_before(mock: aioresponses) -> None:
    mock.post(ORDERS, status=201, payload={"order": order(created_at="string")})
    mock.get(ORDER_7001, payload={"order": order(created_at="string")})

    async with make_client(decoding="strict") as client:
        with pytest.raises(OrderOutcomeUnknownError):
            await client.orders.create(order_request())
        with pytest.raises(APIResponseValidationError, match="created_at"):
            await client.orders.get(7001)


async def test_the_decoding_mode_comes_from_the_environment(
    mock: aioresponses, monkeypatch: pytest.MonkeyPatch
) -> None:
    mock.get(ORDER_7001, payload={"order": order(created_at="string")}, repeat=True)
    monkeypatch.setenv("SHIPPING_DECODING", "strict")
    async with make_client() as client:
        with pytest.raises(APIResponseValidationError):
            await client.orders.get(7001)
    async with make_client(decoding="lenient") as client:
        assert (await client.orders.get(7001)).id == 7001
    monkeypatch.setenv("SHIPPING_DECODING", "loose")
    with pytest.raises(ConfigurationError, match="SHIPPING_DECODING"):
        make_client()


async def test_a_webhook_answer_counts_only_with_its_id_and_token(
    client: AsyncShippingClient, mock: aioresponses
) -> None:
    hooks = BASE_URL + "/webhooks"
    mock.post(hooks, status=201, payload={"webhook": webhook(status=["active"])})
    mock.post(hooks, status=201, payload={"webhook": webhook(token=12345)})

    created = await client.webhooks.create("https://hooks.example.test/s", ["x"])
    assert (created.id, created.token, paths(created.undecoded)) == (
        77,
        "whk_token_abc",
        ["status"],
    )

    with pytest.raises(OutcomeUnknownError) as caught:
        await client.webhooks.create("https://hooks.example.test/s", ["x"])
    assert caught.value.operation == "create_webhook"
    assert "webhook.token" in str(caught.value.__cause__)


async def test_a_booked_pickup_with_an_odd_time_keeps_its_confirmation(
    client: AsyncShippingClient, mock: aioresponses
) -> None:
    url = ORDER_7001 + "/schedule_pickups"
    mock.post(url, status=201, payload={"scheduled_pickup": scheduled_pickup(time_to="noon")})
    mock.post(url, status=201, payload={"scheduled_pickup": scheduled_pickup(
        confirmation_number=None, error_message=None)})  # fmt: skip

    booked = await client.orders.schedule_pickup(7001, window())
    assert (booked.confirmation_number, booked.time_to) == ("CONF-1", None)
    assert paths(booked.undecoded) == ["time_to"]

    with pytest.raises(OutcomeUnknownError):
        await client.orders.schedule_pickup(7001, window())
    assert calls(mock, "POST", "/orders/7001/schedule_pickups") == 2


async def test_a_carrier_refusal_is_read_by_its_message(
    client: AsyncShippingClient, mock: aioresponses
) -> None:
    refused = scheduled_pickup(confirmation_number=None, error_message="no courier")
    mock.post(ORDER_7001 + "/schedule_pickups", status=201, payload={"scheduled_pickup": refused})

    booked = await client.orders.schedule_pickup(7001, window())

    assert booked.rejected
    assert booked.error_message == "no courier"


@pytest.mark.parametrize(
    ("path", "operation"),
    [
        pytest.param("/orders/7001/waybills", "create_waybill", id="waybill"),
        pytest.param("/orders/7001/schedule_pickups", "schedule_pickup", id="pickup"),
    ],
)
async def test_a_5xx_to_a_post_that_may_have_acted_is_unknown_and_still_a_5xx(
    client: AsyncShippingClient, mock: aioresponses, path: str, operation: str
) -> None:
    mock.post(BASE_URL + path, status=503, body=b"unavailable", repeat=True)

    send = (
        client.orders.create_waybill(7001)
        if operation == "create_waybill"
        else client.orders.schedule_pickup(7001, window())
    )
    with pytest.raises(InternalServerError) as caught:
        await send

    assert isinstance(caught.value, OutcomeUnknownError)
    assert (caught.value.operation, caught.value.status) == (operation, 503)
    assert calls(mock, "POST", path) == 1


async def test_an_availability_that_cannot_be_read_is_dropped_and_logged(
    client: AsyncShippingClient, mock: aioresponses, caplog: pytest.LogCaptureFixture
) -> None:
    slots = pickup_availabilities()
    slots[0]["cut_off_time"] = "2 pm\x1b[31m"
    mock.get(ORDER_7001 + "/pickup_availabilities", payload=slots)

    with caplog.at_level(logging.WARNING, logger="shipping_async"):
        found = await client.orders.pickup_availabilities(7001)

    assert [str(slot.pickup_date) for slot in found] == ["2026-01-07"]
    assert "[0]" in caplog.text
    assert "\x1b" not in caplog.text  # the server's text is escaped in the log


async def test_a_hostile_answer_with_many_odd_fields_is_bounded(
    client: AsyncShippingClient, mock: aioresponses
) -> None:
    body = order()
    body["shipments"] = [{"status": index} for index in range(500)]
    mock.get(ORDER_7001, payload={"order": body})

    with pytest.raises(APIResponseValidationError):
        await client.orders.get(7001)
