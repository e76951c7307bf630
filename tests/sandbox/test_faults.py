"""Injected faults: status, delay, dropped connections before/after, malformed bodies."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest

from shipping_async.clock import ManualClock
from shipping_async.sandbox import SandboxControlError, SandboxServer

from .support import TOKEN, Api, order_body


async def _order_request(api: Api, reference: str = "cref-1") -> tuple[int, dict[str, object]]:
    quote = await api.quote()
    body = order_body(quote["estimates"][0]["estimate_id"], customer_reference=reference)
    return quote["estimates"][0]["estimate_id"], body


async def test_status_fault_answers_without_processing(api: Api) -> None:
    _, body = await _order_request(api)
    api.server.control.add_fault("status", "/orders", method="POST", status=503, count=2)
    first = await api.call("POST", "/orders", json=body)
    second = await api.call("POST", "/orders", json=body)
    third = await api.call("POST", "/orders", json=body)
    assert first.status == second.status == 503
    assert first.body == {
        "success": False,
        "error": "Injected fault: 503 Service Unavailable",
        "errors": [],
    }
    assert third.status == 201
    created = [r.order_id for r in api.server.control.requests(method="POST", path="/orders")]
    assert created == [None, None, third.body["order"]["id"]]


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_status_fault_with_a_custom_message(api: Api, status: int) -> None:
    api.server.control.add_fault("status", "/quotes", status=status, message="upstream down")
    reply = await api.call("POST", "/quotes", json={})
    assert (reply.status, reply.body) == (
        status,
        {"success": False, "error": "upstream down", "errors": []},
    )


async def test_path_pattern_matches_one_segment_per_star(api: Api) -> None:
    order = await api.order()
    api.server.control.add_fault("status", "/orders/*/waybills", method="POST", status=502)
    get = await api.call("GET", f"/orders/{order['id']}")
    waybills = await api.call("POST", f"/orders/{order['id']}/waybills")
    again = await api.call("POST", f"/orders/{order['id']}/waybills")
    assert get.status == 200
    assert waybills.status == 502
    assert again.status == 201


async def test_method_must_match(api: Api) -> None:
    order = await api.order()
    api.server.control.add_fault("status", "/orders/*", method="DELETE", status=500)
    get = await api.call("GET", f"/orders/{order['id']}")
    delete = await api.call("DELETE", f"/orders/{order['id']}")
    assert (get.status, delete.status) == (200, 500)


async def test_unauthenticated_requests_do_not_consume_faults(api: Api) -> None:
    api.server.control.add_fault("status", "/quotes", status=500)
    refused = await api.call("POST", "/quotes", token="wrong", json={})
    faulted = await api.call("POST", "/quotes", json={})
    assert (refused.status, faulted.status) == (401, 500)


@pytest.fixture
async def manual() -> AsyncIterator[tuple[Api, ManualClock]]:
    clock = ManualClock()
    async with (
        SandboxServer(token=TOKEN, clock=clock) as server,
        aiohttp.ClientSession() as session,
    ):
        yield Api(session, server), clock


async def test_delay_holds_the_request_for_sandbox_seconds(
    manual: tuple[Api, ManualClock],
) -> None:
    api, clock = manual
    _, body = await _order_request(api)
    api.server.control.add_fault("delay", "/orders", seconds=30)
    pending = asyncio.create_task(api.call("POST", "/orders", json=body))
    for _ in range(1000):  # until the request is held by the fault
        if api.server.control.requests(path="/orders"):
            break
        await asyncio.sleep(0.001)
    clock.advance(29)
    await asyncio.sleep(0.02)
    assert not pending.done()
    clock.advance(1)
    reply = await pending
    assert reply.status == 201
    assert api.server.control.requests(path="/orders")[0].fault == "delay"


async def test_drop_before_closes_without_processing(api: Api) -> None:
    _, body = await _order_request(api, "dropped-before")
    api.server.control.add_fault("drop_before", "/orders", method="POST")
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await api.call("POST", "/orders", json=body)
    [record] = api.server.control.requests(path="/orders")
    assert (record.status, record.fault, record.order_id) == (None, "drop_before", None)


async def test_drop_after_creates_the_order_but_never_answers(api: Api) -> None:
    _, body = await _order_request(api, "ambiguous")
    api.server.control.add_fault("drop_after", "/orders", method="POST")
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await api.call("POST", "/orders", json=body)
    [record] = api.server.control.requests(path="/orders")
    assert (record.status, record.fault) == (None, "drop_after")
    assert record.customer_reference == "ambiguous"
    assert record.order_id is not None
    fetched = await api.call("GET", f"/orders/{record.order_id}")
    assert fetched.body["order"]["customer_reference"] == "ambiguous"


async def test_malformed_answers_the_status_with_broken_json(api: Api) -> None:
    _, body = await _order_request(api)
    api.server.control.add_fault("malformed", "/orders", method="POST")
    reply = await api.call("POST", "/orders", json=body)
    assert reply.status == 201
    assert reply.headers["Content-Type"].startswith("application/json")
    with pytest.raises(json.JSONDecodeError):
        json.loads(reply.text)
    [record] = api.server.control.requests(path="/orders")
    assert record.order_id is not None  # processed: the order exists


async def test_faults_over_http_list_and_clear(api: Api) -> None:
    added = await api.call(
        "POST",
        "/_sandbox/faults",
        json={"kind": "status", "path": "/orders", "method": "post", "status": 500, "count": 3},
    )
    listed = await api.call("GET", "/_sandbox/faults")
    cleared = await api.call("DELETE", "/_sandbox/faults")
    after = await api.call("GET", "/_sandbox/faults")
    assert added.status == 201
    assert added.body["fault"] == {
        "id": 1,
        "kind": "status",
        "method": "POST",
        "path": "/orders",
        "remaining": 3,
        "status": 500,
        "seconds": None,
        "message": None,
    }
    assert listed.body == {"faults": [added.body["fault"]]}
    assert cleared.body == {"success": True, "error": "", "errors": []}
    assert after.body == {"faults": []}
    assert (await api.call("POST", "/quotes", json={})).status == 400


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"kind": "explode", "path": "/orders"}, id="unknown-kind"),
        pytest.param({"kind": "status", "path": "/orders"}, id="status-without-status"),
        pytest.param({"kind": "status", "path": "/orders", "status": 200}, id="status-200"),
        pytest.param({"kind": "delay", "path": "/orders", "seconds": -1}, id="negative-delay"),
        pytest.param({"kind": "delay", "path": "/orders"}, id="delay-without-seconds"),
        pytest.param({"kind": "drop_before", "path": "orders"}, id="relative-path"),
        pytest.param({"kind": "drop_before", "path": "/orders", "count": 0}, id="zero-count"),
        pytest.param({"kind": "drop_after", "path": "/orders", "status": 500}, id="stray-status"),
        pytest.param({"kind": "drop_after", "path": "/orders", "when": 1}, id="unknown-field"),
    ],
)
async def test_invalid_fault_is_400(api: Api, spec: dict[str, object]) -> None:
    reply = await api.call("POST", "/_sandbox/faults", json=spec)
    assert reply.status == 400
    assert reply.body["success"] is False
    assert reply.body["error"]
    assert (await api.call("GET", "/_sandbox/faults")).body == {"faults": []}


async def test_invalid_fault_in_process_raises(api: Api) -> None:
    with pytest.raises(SandboxControlError, match="status"):
        api.server.control.add_fault("status", "/orders")


async def test_aiohttp_retries_an_idempotent_request_dropped_once(api: Api) -> None:
    # aiohttp re-sends GET/PUT/DELETE once after a disconnect: a client built on it only
    # sees a dropped idempotent request when the fault hits twice.
    order = await api.order()
    api.server.control.add_fault("drop_before", f"/orders/{order['id']}", method="GET")
    retried = await api.call("GET", f"/orders/{order['id']}")
    api.server.control.add_fault("drop_before", f"/orders/{order['id']}", method="GET", count=2)
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await api.call("GET", f"/orders/{order['id']}")
    assert retried.status == 200
    faults = [r.fault for r in api.server.control.requests(method="GET")]
    assert faults == ["drop_before", None, "drop_before", "drop_before"]


async def test_an_injected_429_says_the_sandboxs_own_scaled_window(api: Api) -> None:
    _, body = await _order_request(api)
    api.server.control.add_fault("status", "/orders", method="POST", status=429)
    reply = await api.call("POST", "/orders", json=body)
    # Speed 100: the API's 60 s window lasts 0.6 real seconds, as the real 429 says.
    assert (reply.status, reply.body["error"]) == (429, "20 of 20 in 0.6 seconds")


async def test_delay_after_creates_the_order_and_answers_late(api: Api) -> None:
    _, body = await _order_request(api)
    api.server.control.add_fault("delay_after", "/orders", method="POST", seconds=30)
    sent = asyncio.get_running_loop().time()
    reply = await api.call("POST", "/orders", json=body)
    took = asyncio.get_running_loop().time() - sent
    (record,) = api.server.control.requests(method="POST", path="/orders")
    assert reply.status == 201
    assert took >= 0.3  # 30 s of sandbox time at speed 100
    assert (record.fault, record.order_id) == ("delay_after", reply.body["order"]["id"])
