"""The control API and handle: statuses, request log, deliveries, reset, seeds, create_app."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from shipping_async.clock import ManualClock
from shipping_async.sandbox import SANDBOX_KEY, SandboxControl, SandboxServer, create_app

from .receiver import running_receiver
from .support import INVALID, TOKEN, Api, order_body, quote_body


async def test_status_over_http_moves_every_leg(api: Api) -> None:
    order = await api.order(hub=True)
    reply = await api.call(
        "POST", f"/_sandbox/orders/{order['id']}/status", json={"status": "in_transit"}
    )
    assert reply.status == 200
    assert reply.body["order"]["status"] == "in_transit"
    assert {leg["status"] for leg in reply.body["order"]["shipments"]} == {"in_transit"}
    fetched = await api.call("GET", f"/orders/{order['id']}")
    assert fetched.body == reply.body


async def test_status_over_http_moves_one_leg(api: Api) -> None:
    order = await api.order(hub=True)
    reply = await api.call(
        "POST", f"/_sandbox/orders/{order['id']}/status", json={"status": "delivered", "leg": 1}
    )
    legs = [leg["status"] for leg in reply.body["order"]["shipments"]]
    assert legs == ["order_received", "delivered"]
    assert reply.body["order"]["date_delivered"] is None  # the first leg is not delivered


async def test_delivering_every_leg_sets_date_delivered(api: Api) -> None:
    order = await api.order()
    moved = api.server.control.set_status(order["id"], "delivered")
    assert re.fullmatch(r"\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} UTC", moved["date_delivered"])


@pytest.mark.parametrize(
    ("body", "status"),
    [
        pytest.param({"status": "teleported"}, 400, id="unknown-status"),
        pytest.param({"status": "in_transit", "leg": 2}, 400, id="leg-out-of-range"),
        pytest.param({"status": "in_transit", "legs": 0}, 400, id="unknown-field"),
        pytest.param({}, 400, id="no-status"),
    ],
)
async def test_bad_status_change_is_refused(api: Api, body: dict[str, Any], status: int) -> None:
    order = await api.order()
    reply = await api.call("POST", f"/_sandbox/orders/{order['id']}/status", json=body)
    assert reply.status == status
    assert reply.body["success"] is False


async def test_status_change_of_unknown_order_is_404(api: Api) -> None:
    reply = await api.call("POST", "/_sandbox/orders/1/status", json={"status": "in_transit"})
    assert reply.status == 404
    assert reply.body == {"success": False, "error": "Order with id 1 not found", "errors": []}


async def test_request_log_records_every_api_request(api: Api) -> None:
    order = await api.order()
    await api.call("POST", "/quotes", json={})
    reply = await api.call("GET", "/_sandbox/requests")
    records = reply.body["requests"]
    assert [(r["method"], r["path"], r["status"]) for r in records] == [
        ("POST", "/quotes", 201),
        ("POST", "/orders", 201),
        ("POST", "/quotes", 400),
    ]
    assert set(records[0]) == {
        "id", "method", "path", "status", "at", "monotonic", "fault", "customer_reference",
        "order_id", "detail", "account", "headers", "body",
    }  # fmt: skip
    assert records[1]["customer_reference"] == "cref-1"
    # Bodies and headers are kept (bytes travel base64 in JSON); the token is not.
    assert json.loads(base64.b64decode(records[2]["body"])) == {}
    assert json.loads(base64.b64decode(records[1]["body"]))["order"]["customer_reference"] == (
        "cref-1"
    )
    assert records[1]["headers"]["Authorization"] == "Bearer ***"
    assert api.server.token not in json.dumps(records)
    assert records[1]["order_id"] == order["id"]
    assert records[2]["detail"]
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z", records[0]["at"])


async def test_request_log_filters_by_method_and_path(api: Api) -> None:
    await api.order()
    reply = await api.call(
        "GET", "/_sandbox/requests", params={"method": "post", "path": "/orders"}
    )
    assert [r["path"] for r in reply.body["requests"]] == ["/orders"]


async def test_request_log_shows_a_duplicate_created_by_a_blind_retry(api: Api) -> None:
    quote = await api.quote()
    body = order_body(quote["estimates"][0]["estimate_id"], customer_reference="once-only")
    api.server.control.add_fault("drop_after", "/orders", method="POST")
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await api.call("POST", "/orders", json=body)
    await api.call("POST", "/orders", json=body)  # a client that retries without checking
    created = [
        r.order_id
        for r in api.server.control.requests(method="POST", path="/orders")
        if r.customer_reference == "once-only" and r.order_id is not None
    ]
    assert len(created) == 2


async def test_unauthenticated_requests_are_only_counted_and_unknown_ones_logged(
    api: Api,
) -> None:
    await api.call("GET", "/orders/1", token="nope")
    await api.call("GET", "/no/such/route")
    records = api.server.control.requests()
    assert [(r.path, r.status) for r in records] == [("/no/such/route", 404)]
    assert api.server.control.refused_requests() == 1


async def test_deliveries_over_http(api: Api) -> None:
    async with running_receiver() as receiver:
        await api.call(
            "POST",
            "/webhooks",
            json={"webhook": {"target_url": receiver.url, "events": ["shipment.updated.status"]}},
        )
        order = await api.order()
        await api.server.control.wait_for_deliveries()
        reply = await api.call("GET", "/_sandbox/deliveries")
    [attempt] = reply.body["deliveries"]
    assert attempt["attempt"] == 1
    assert attempt["result"] == "delivered"
    assert attempt["status"] == 200
    assert attempt["object_id"] == order["id"]
    assert attempt["event_type"] == "shipment.updated.status"
    assert attempt["sent_at"] >= attempt["scheduled_at"]
    assert attempt["body"] == receiver.deliveries[0].body


async def test_reset_empties_the_sandbox_and_keeps_the_token(api: Api) -> None:
    order = await api.order()
    webhook = await api.call(
        "POST",
        "/webhooks",
        json={"webhook": {"target_url": "https://x.io/h", "events": ["shipment.updated.status"]}},
    )
    api.server.control.add_fault("status", "/quotes", status=500, count=5)
    reply = await api.call("POST", "/_sandbox/reset")
    assert reply.body == {"success": True, "error": "", "errors": []}
    assert api.server.control.faults() == []
    assert api.server.control.requests() == []
    assert api.server.control.deliveries() == []
    assert (await api.call("GET", f"/orders/{order['id']}")).status == 404
    assert (await api.call("GET", f"/quotes/{order['quote_id']}")).status == 404
    assert (await api.call("GET", f"/webhooks/{webhook.body['webhook']['id']}")).status == 404
    assert (await api.call("POST", "/quotes", json=quote_body())).status == 201  # same token


async def test_reset_clears_the_rate_window() -> None:
    async with (
        SandboxServer(token=TOKEN, clock=ManualClock(), rate_limit=1) as server,
        aiohttp.ClientSession() as session,
    ):
        api = Api(session, server)
        await api.call("POST", "/orders", json={})
        limited = await api.call("POST", "/orders", json={})
        await server.control.reset()
        after = await api.call("POST", "/orders", json={})
    assert (limited.status, after.status) == (429, 400)


async def _script(server: SandboxServer) -> list[Any]:
    async with aiohttp.ClientSession() as session:
        api = Api(session, server)
        order = await api.order(hub=True)
        waybills = await api.call("POST", f"/orders/{order['id']}/waybills")
        hook = await api.call(
            "POST",
            "/webhooks",
            json={
                "webhook": {"target_url": "https://x.io/h", "events": ["shipment.updated.status"]}
            },
        )
        values: list[Any] = [
            server.token,
            order["id"],
            order["quote_id"],
            order["reference_number"],
        ]
        values += [leg["waybill"] for leg in waybills.body["order"]["shipments"]]
        values += [hook.body["webhook"]["id"], hook.body["webhook"]["token"]]
        return values


async def test_same_seed_replays_the_same_values() -> None:
    async with SandboxServer(seed=42, speed=100) as first:
        one = await _script(first)
    async with SandboxServer(seed=42, speed=100) as second:
        two = await _script(second)
        await second.control.reset()
        after_reset = await _script(second)
    async with SandboxServer(seed=43, speed=100) as other:
        three = await _script(other)
    assert one == two == after_reset
    assert all(a != b for a, b in zip(one, three, strict=True))


async def test_without_seed_tokens_differ() -> None:
    async with SandboxServer() as first, SandboxServer() as second:
        assert first.token != second.token


async def test_create_app_can_be_mounted_by_the_user() -> None:
    app = create_app(token="mounted", speed=100, rate_mode="fixed")
    async with TestClient(TestServer(app)) as client:
        headers = {"Authorization": "Bearer mounted"}
        reply = await client.post("/client_api/v2/quotes", json=quote_body(), headers=headers)
        refused = await client.post("/client_api/v2/quotes", json={}, headers=headers)
        assert reply.status == 201
        assert await refused.json() == INVALID
    sandbox = app[SANDBOX_KEY]
    assert sandbox.token == "mounted"
    assert sandbox.config.rate_mode == "fixed"
    assert len(SandboxControl(sandbox).requests()) == 2


def test_clock_and_speed_together_are_refused() -> None:
    with pytest.raises(ValueError, match="clock or speed"):
        create_app(token="t", clock=ManualClock(), speed=10)


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="rate_mode"):
        create_app(token="t", rate_mode="leaky")  # type: ignore[arg-type]


async def test_repr_never_shows_the_token(server: SandboxServer) -> None:
    assert server.token not in repr(server)
    assert "running" in repr(server)


async def test_injected_clock_is_the_sandbox_clock() -> None:
    clock = ManualClock()
    async with SandboxServer(clock=clock) as server:
        assert server.clock is clock
        assert server.base_url.endswith("/client_api/v2")
