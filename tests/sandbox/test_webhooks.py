"""Webhooks: CRUD with its 404/422 bodies, and deliveries with retries down to failing."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from shipping_async.sandbox import SandboxServer

from .receiver import Receiver, running_receiver
from .support import TOKEN, Api

EVENTS = ["shipment.updated.status", "shipment.updated.waybill"]
BODY_KEYS = {
    "object_type", "object_id", "event_type", "original_value", "updated_value",
    "updated_at_utc", "token",
}  # fmt: skip


def _hook(
    url: str = "https://example.com/hooks", events: list[str] | None = None
) -> dict[str, Any]:
    return {"webhook": {"target_url": url, "events": EVENTS if events is None else events}}


def _unprocessable(*texts: str) -> dict[str, Any]:
    return {"success": False, "error": "[" + ",".join(f'"{t}"' for t in texts) + "]", "errors": []}


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with running_receiver() as running:
        yield running


async def test_register_returns_an_active_webhook_with_a_token(api: Api) -> None:
    reply = await api.call("POST", "/webhooks", json=_hook())
    assert reply.status == 201
    webhook = reply.body["webhook"]
    assert set(webhook) == {"id", "target_url", "events", "token", "status"}
    assert webhook["target_url"] == "https://example.com/hooks"
    assert webhook["events"] == EVENTS
    assert webhook["status"] == "active"
    assert len(webhook["token"]) >= 16


async def test_get_returns_the_webhook(api: Api) -> None:
    created = (await api.call("POST", "/webhooks", json=_hook())).body
    reply = await api.call("GET", f"/webhooks/{created['webhook']['id']}")
    assert (reply.status, reply.body) == (200, created)


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
async def test_update_replaces_both_fields_and_keeps_the_token(api: Api, method: str) -> None:
    created = (await api.call("POST", "/webhooks", json=_hook())).body["webhook"]
    new = _hook("http://127.0.0.1:9/other", ["shipment.updated.waybill"])
    reply = await api.call(method, f"/webhooks/{created['id']}", json=new)
    assert reply.status == 200
    assert reply.body["webhook"] == {
        **created,
        "target_url": "http://127.0.0.1:9/other",
        "events": ["shipment.updated.waybill"],
    }
    fetched = await api.call("GET", f"/webhooks/{created['id']}")
    assert fetched.body == reply.body


async def test_delete_then_404(api: Api) -> None:
    created = (await api.call("POST", "/webhooks", json=_hook())).body["webhook"]
    deleted = await api.call("DELETE", f"/webhooks/{created['id']}")
    again = await api.call("GET", f"/webhooks/{created['id']}")
    assert (deleted.status, deleted.body) == (200, {"success": True, "error": "", "errors": []})
    assert again.status == 404
    assert again.body == {
        "success": False,
        "error": f"Webhook endpoint with id {created['id']} not found",
        "errors": [],
    }


@pytest.mark.parametrize("method", ["GET", "PUT", "PATCH", "DELETE"])
async def test_unknown_webhook_is_404(api: Api, method: str) -> None:
    reply = await api.call(method, "/webhooks/5", json=_hook())
    assert reply.status == 404
    assert reply.body == {
        "success": False,
        "error": "Webhook endpoint with id 5 not found",
        "errors": [],
    }


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(
            _hook("ftp://example.com/x"), _unprocessable("Target url is invalid"), id="ftp"
        ),
        pytest.param(_hook("not a url"), _unprocessable("Target url is invalid"), id="not-a-url"),
        pytest.param(_hook("https://"), _unprocessable("Target url is invalid"), id="no-host"),
        pytest.param(
            _hook("https://exa mple.com/hooks"),
            _unprocessable("Target url is invalid"),
            id="space-in-host",
        ),
        pytest.param(
            _hook("http://<script>/hooks"), _unprocessable("Target url is invalid"), id="brackets"
        ),
        pytest.param(
            _hook("https://a>b.example.com/"), _unprocessable("Target url is invalid"), id="gt"
        ),
        pytest.param(
            _hook(events=["foo", "shipment.updated.status", "bar"]),
            _unprocessable("Events not permitted: foo, bar"),
            id="unknown-events",
        ),
        pytest.param(
            _hook("nope", ["order.created"]),
            _unprocessable("Target url is invalid", "Events not permitted: order.created"),
            id="both",
        ),
        pytest.param(_hook(events=[]), _unprocessable("Events can't be blank"), id="no-events"),
    ],
)
async def test_invalid_webhook_is_422_with_a_json_array_text(
    api: Api, body: dict[str, Any], expected: dict[str, Any]
) -> None:
    reply = await api.call("POST", "/webhooks", json=body)
    assert (reply.status, reply.body) == (422, expected)


async def test_undecodable_webhook_body_is_422(api: Api) -> None:
    reply = await api.call("POST", "/webhooks", json={"webhook": {"target_url": "https://x.io"}})
    assert reply.status == 422
    assert reply.body["errors"] == []
    assert reply.body["error"].startswith('["')
    assert "events" in reply.body["error"]


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
async def test_invalid_update_is_422_and_changes_nothing(api: Api, method: str) -> None:
    created = (await api.call("POST", "/webhooks", json=_hook())).body
    webhook_id = created["webhook"]["id"]
    reply = await api.call(method, f"/webhooks/{webhook_id}", json=_hook(events=["nope"]))
    assert (reply.status, reply.body) == (422, _unprocessable("Events not permitted: nope"))
    assert (await api.call("GET", f"/webhooks/{webhook_id}")).body == created


async def _register(api: Api, url: str, events: list[str] | None = None) -> dict[str, Any]:
    reply = await api.call("POST", "/webhooks", json=_hook(url, events))
    assert reply.status == 201
    webhook: dict[str, Any] = reply.body["webhook"]
    return webhook


async def test_order_creation_fires_one_status_event_per_leg(api: Api, receiver: Receiver) -> None:
    webhook = await _register(api, receiver.url)
    order = await api.order(hub=True)
    await api.server.control.wait_for_deliveries()
    assert [d.content_type for d in receiver.deliveries] == ["application/json"] * 2
    for body in receiver.bodies():
        assert set(body) == BODY_KEYS
        assert body["object_type"] == "order"
        assert body["object_id"] == order["id"]
        assert body["event_type"] == "shipment.updated.status"
        assert (body["original_value"], body["updated_value"]) == ("", "order_received")
        assert body["token"] == webhook["token"]
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z", body["updated_at_utc"])


async def test_waybills_fire_one_waybill_event_per_leg(api: Api, receiver: Receiver) -> None:
    await _register(api, receiver.url, ["shipment.updated.waybill"])
    order = await api.order(hub=True)
    reply = await api.call("POST", f"/orders/{order['id']}/waybills")
    await api.server.control.wait_for_deliveries()
    waybills = {leg["waybill"] for leg in reply.body["order"]["shipments"]}
    bodies = receiver.bodies()
    assert {body["event_type"] for body in bodies} == {"shipment.updated.waybill"}
    assert {body["updated_value"] for body in bodies} == waybills
    assert {body["original_value"] for body in bodies} == {""}


async def test_live_statuses_fire_and_others_do_not(api: Api, receiver: Receiver) -> None:
    await _register(api, receiver.url, ["shipment.updated.status"])
    order = await api.order()
    control = api.server.control
    for status in ("awaiting_pickup", "in_transit", "delivered"):
        control.set_status(order["id"], status)
    await control.wait_for_deliveries()
    moves = [(b["original_value"], b["updated_value"]) for b in receiver.bodies()]
    assert moves == [
        ("", "order_received"),
        ("awaiting_pickup", "in_transit"),
        ("in_transit", "delivered"),
    ]


async def test_cancellation_fires_nothing(api: Api, receiver: Receiver) -> None:
    order = await api.order()
    await _register(api, receiver.url)
    await api.call("DELETE", f"/orders/{order['id']}")
    await api.server.control.wait_for_deliveries()
    assert receiver.deliveries == []


async def test_hub_leg_moves_fire_per_leg(api: Api, receiver: Receiver) -> None:
    order = await api.order(hub=True)
    await _register(api, receiver.url)
    api.server.control.set_status(order["id"], "in_transit", leg=0)
    await api.server.control.wait_for_deliveries()
    assert [b["updated_value"] for b in receiver.bodies()] == ["in_transit"]


async def test_updated_target_receives_the_next_events(api: Api, receiver: Receiver) -> None:
    webhook = await _register(api, "http://127.0.0.1:9/nowhere", ["shipment.updated.status"])
    await api.call("PUT", f"/webhooks/{webhook['id']}", json=_hook(receiver.url))
    await api.order()
    await api.server.control.wait_for_deliveries()
    assert len(receiver.bodies("shipment.updated.status")) == 1


@asynccontextmanager
async def _sandbox(**options: Any) -> AsyncIterator[Api]:
    async with (
        SandboxServer(token=TOKEN, seed=1, **options) as server,
        aiohttp.ClientSession() as session,
    ):
        yield Api(session, server)


@pytest.fixture
async def fast_api() -> AsyncIterator[Api]:
    # Speed 200: the 20/40/60/80 s retry schedule lasts one real second.
    async with _sandbox(speed=200) as api:
        yield api


@pytest.fixture
async def one_retry_api() -> AsyncIterator[Api]:
    # One retry 1 s after the failure: a webhook fails within a few real milliseconds.
    async with _sandbox(speed=200, retry_delays=(1.0,)) as api:
        yield api


async def test_failures_are_retried_on_schedule_then_the_webhook_fails(
    fast_api: Api, receiver: Receiver
) -> None:
    api = fast_api
    receiver.default_status = 500
    webhook = await _register(api, receiver.url, ["shipment.updated.status"])
    await api.order()
    await api.server.control.wait_for_deliveries()
    attempts = api.server.control.deliveries()
    assert [a.attempt for a in attempts] == [1, 2, 3, 4, 5]
    assert {a.result for a in attempts} == {"http_error"}
    assert {a.status for a in attempts} == {500}
    for previous, attempt, delay in zip(attempts, attempts[1:], (20, 40, 60, 80), strict=False):
        assert previous.finished_at is not None
        assert attempt.sent_at is not None
        waited = attempt.sent_at - previous.finished_at
        assert delay <= waited < delay + 10, (delay, waited)
    assert len(receiver.deliveries) == 5
    fetched = await api.call("GET", f"/webhooks/{webhook['id']}")
    assert fetched.body["webhook"]["status"] == "failing"


async def test_failing_webhook_gets_nothing_more_and_stays_failing(
    one_retry_api: Api, receiver: Receiver
) -> None:
    api = one_retry_api
    receiver.default_status = 503
    webhook = await _register(api, receiver.url)
    await api.order()
    await api.server.control.wait_for_deliveries()
    receiver.default_status = 200
    updated = await api.call("PATCH", f"/webhooks/{webhook['id']}", json=_hook(receiver.url))
    before = len(receiver.deliveries)
    await api.order()
    await api.server.control.wait_for_deliveries()
    assert updated.body["webhook"]["status"] == "failing"
    assert updated.body["webhook"]["token"] == webhook["token"]
    assert len(receiver.deliveries) == before


async def test_a_retry_that_succeeds_keeps_the_webhook_active(
    fast_api: Api, receiver: Receiver
) -> None:
    api = fast_api
    receiver.statuses.extend([500, 302])
    webhook = await _register(api, receiver.url, ["shipment.updated.status"])
    await api.order()
    await api.server.control.wait_for_deliveries()
    results = [a.result for a in api.server.control.deliveries()]
    assert results == ["http_error", "http_error", "delivered"]  # a 3xx is not a 2xx
    fetched = await api.call("GET", f"/webhooks/{webhook['id']}")
    assert fetched.body["webhook"]["status"] == "active"


@pytest.mark.parametrize("status", [302, 307])
async def test_a_redirect_is_a_failed_delivery_retried_and_never_followed(
    fast_api: Api, status: int
) -> None:
    api = fast_api
    followed: list[str] = []

    async def redirect(request: web.Request) -> web.Response:
        return web.Response(status=status, headers={"Location": "/elsewhere"})

    async def elsewhere(request: web.Request) -> web.Response:
        followed.append(request.method)  # a 307 would re-post the body, token included
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/hook", redirect)
    app.router.add_route("*", "/elsewhere", elsewhere)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
        webhook = await _register(api, url, ["shipment.updated.status"])
        await api.order()
        await api.server.control.wait_for_deliveries()
    finally:
        await runner.cleanup()

    attempts = api.server.control.deliveries()
    assert [(a.attempt, a.status, a.result) for a in attempts] == [
        (attempt, status, "http_error") for attempt in range(1, 6)
    ]
    assert followed == []
    fetched = await api.call("GET", f"/webhooks/{webhook['id']}")
    assert fetched.body["webhook"]["status"] == "failing"


async def test_no_answer_within_the_timeout_is_a_failure(receiver: Receiver) -> None:
    receiver.hang = True
    # 10 s of timeout at speed 1000 is 10 real ms; one retry after 1 s.
    async with (
        SandboxServer(token=TOKEN, speed=1000, retry_delays=(1.0,)) as server,
        aiohttp.ClientSession() as session,
    ):
        api = Api(session, server)
        webhook = await _register(api, receiver.url)
        await api.order()
        await server.control.wait_for_deliveries()
        fetched = await api.call("GET", f"/webhooks/{webhook['id']}")
        attempts = server.control.deliveries()
    assert [(a.attempt, a.result) for a in attempts] == [(1, "timeout"), (2, "timeout")]
    assert fetched.body["webhook"]["status"] == "failing"


async def test_unreachable_target_is_a_connection_error(one_retry_api: Api) -> None:
    api = one_retry_api
    await _register(api, "http://127.0.0.1:9/closed", ["shipment.updated.status"])
    await api.order()
    await api.server.control.wait_for_deliveries()
    attempts = api.server.control.deliveries()
    assert [a.result for a in attempts] == ["connection_error", "connection_error"]


async def test_deleting_a_webhook_skips_its_pending_retries(
    fast_api: Api, receiver: Receiver
) -> None:
    api = fast_api
    receiver.default_status = 500
    webhook = await _register(api, receiver.url, ["shipment.updated.status"])
    await api.order()
    await receiver.wait_for(1)
    await api.call("DELETE", f"/webhooks/{webhook['id']}")
    await api.server.control.wait_for_deliveries()
    assert [a.result for a in api.server.control.deliveries()][-1] == "skipped"
    assert len(receiver.deliveries) == 1


async def test_shutdown_cancels_pending_deliveries(receiver: Receiver) -> None:
    receiver.default_status = 500
    async with (
        SandboxServer(token=TOKEN, speed=1) as server,
        aiohttp.ClientSession() as session,
    ):
        api = Api(session, server)
        await _register(api, receiver.url)
        await api.order()
        await receiver.wait_for(1)
    # The retry 20 real seconds away was cancelled and awaited: no task outlives the server.
    leftovers = [
        t
        for t in asyncio.all_tasks()
        if getattr(t.get_coro(), "__qualname__", "") == "Dispatcher._deliver"
    ]
    assert leftovers == []
    assert server.control.deliveries()[-1].result == "cancelled"
