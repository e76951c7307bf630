"""The sandbox and its OpenAPI document agree: schemathesis calls every operation of a live sandbox.

The sandbox runs on its own event loop in a background thread (aiohttp is neither ASGI nor
WSGI, and schemathesis sends with ``requests``). The fuzz test sends generated and negative
data to every operation (mostly refusals and 404s); the flow tests send real quotes, orders,
pickups and webhooks so every success answer (both quote shapes, two-leg hub orders) is
checked too. Every answer must have a documented status, content type and body. The test
copy of the document closes every object schema (``additionalProperties: false``), so the
sandbox may not send a field the document lacks either.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import threading
from collections.abc import Iterator
from importlib import resources
from typing import Any

import hypothesis
import jsonschema_rs
import pytest
import requests
import schemathesis
from schemathesis.core import NOT_SET
from yarl import URL

from shipping_async.sandbox import SANDBOX_KEY, SandboxServer
from shipping_async.sandbox._delivery import Dispatcher
from shipping_async.sandbox._state import Webhook

from .support import order_body, quote_body

TOKEN = "openapi-conformance-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: A loopback port nobody listens on: webhook deliveries fail fast and stay on this host.
SINK = "http://127.0.0.1:9/hooks"
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "unsupported_method",
    "allow_header_conformance",
)


def _document() -> dict[str, Any]:
    text = resources.files("shipping_async.sandbox").joinpath("openapi.json").read_text()
    document: dict[str, Any] = json.loads(text)
    return document


def _is_loopback(url: str) -> bool:
    try:
        return ipaddress.ip_address(URL(url).host or "").is_loopback
    except ValueError:
        return False


class _LoopbackDispatcher(Dispatcher):
    """Deliveries only to loopback IPs: fuzzed webhooks may name any host on the internet."""

    __slots__ = ()

    def emit(self, webhooks: list[Webhook], **event: Any) -> None:
        super().emit([hook for hook in webhooks if _is_loopback(hook.target_url)], **event)


class ThreadedSandbox:
    """A :class:`SandboxServer` on its own loop in a daemon thread, for synchronous callers."""

    def __init__(self, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        # Estimates never expire during the run and orders are not rate limited (the 429 has
        # a test of its own); no retries, so a failed delivery ends at once.
        settings = {"speed": 100, "estimate_validity": 1e9, "rate_limit": 10**6}
        self.server = SandboxServer(token=TOKEN, seed=11, retry_delays=(), **settings | options)
        sandbox = self.server.app[SANDBOX_KEY]
        sandbox.dispatcher = _LoopbackDispatcher(
            sandbox.clock, sandbox.config, lambda webhook_id: sandbox.store.webhooks.get(webhook_id)
        )

    def __enter__(self) -> ThreadedSandbox:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self._loop).result(timeout=10)
        return self

    def __exit__(self, *_: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def root(self) -> str:
        return str(URL(self.base_url).origin())

    def control(self, method: str, path: str, body: Any = None) -> Any:
        """A request to the control API (``/_sandbox...``); the decoded answer."""
        response = requests.request(
            method, f"{self.root}/_sandbox{path}", json=body, headers=AUTH, timeout=10
        )
        assert response.ok, (method, path, response.status_code, response.text)
        return response.json()


@pytest.fixture(scope="module")
def sandbox() -> Iterator[ThreadedSandbox]:
    with ThreadedSandbox() as running:
        yield running


def _closed(node: Any) -> Any:
    """A copy with ``additionalProperties: false`` on every object that lists properties."""
    if isinstance(node, list):
        return [_closed(value) for value in node]
    if not isinstance(node, dict):
        return node
    closed = {key: _closed(value) for key, value in node.items()}
    if "properties" in closed and "additionalProperties" not in closed:
        closed["additionalProperties"] = False
    return closed


def _test_schema() -> Any:
    document = _document()
    document["components"]["schemas"] = _closed(document["components"]["schemas"])
    config = schemathesis.Config.from_dict(
        {
            "headers": AUTH,
            "generation": {"mode": "all", "database": "none"},
            "checks": {"enabled": False, **{name: {"enabled": True} for name in CHECKS}},
        }
    )
    return schemathesis.openapi.from_dict(document, config=config)


SCHEMA = _test_schema()


@SCHEMA.parametrize()  # type: ignore[untyped-decorator]
@hypothesis.settings(max_examples=15, deadline=None)
def test_every_answer_has_a_documented_status_content_type_and_body(
    case: schemathesis.Case[Any], sandbox: ThreadedSandbox
) -> None:
    case.call_and_validate(base_url=sandbox.base_url)


def _send(
    sandbox: ThreadedSandbox,
    operation: str,
    expect: int,
    *,
    id: int | None = None,
    body: Any = None,
) -> Any:
    """Send ``operation`` (``"POST /orders"``) with the given data, run the conformance checks
    on the answer and return its JSON."""
    method, path = operation.split(" ", 1)
    case = SCHEMA[path][method].Case(
        path_parameters=None if id is None else {"id": id},
        body=NOT_SET if body is None else body,
        media_type=None if body is None else "application/json",
    )
    response = case.call_and_validate(base_url=sandbox.base_url, headers=AUTH)
    assert response.status_code == expect, response.text
    return response.json()


def _order(sandbox: ThreadedSandbox, estimate_id: int, destination: int) -> int:
    body = order_body(estimate_id, destination=destination)
    order_id: int = _send(sandbox, "POST /orders", 201, body=body)["order"]["id"]
    return order_id


def _window(sandbox: ThreadedSandbox, order_id: int) -> dict[str, str]:
    slots = _send(sandbox, "GET /orders/{id}/pickup_availabilities", 200, id=order_id)
    # The last offered day is never today or tomorrow, so the cut-off cannot refuse it.
    return {"time_from": "10:00", "time_to": "14:00", "scheduled_date": slots[-1]["pickup_date"]}


def test_a_direct_shipment_answers_as_documented(sandbox: ThreadedSandbox) -> None:
    quote = _send(sandbox, "POST /quotes", 201, body=quote_body())
    assert (
        "billable_weight" in _send(sandbox, "GET /quotes/{id}", 200, id=quote["id"])["estimates"][0]
    )
    order_id = _order(sandbox, quote["estimates"][0]["estimate_id"], 124)
    refused = _send(sandbox, "POST /orders/{id}/schedule_pickups", 201, id=order_id,
                    body={"scheduled_pickup": _window(sandbox, order_id)})  # fmt: skip
    assert refused["scheduled_pickup"]["error_message"]  # no waybill yet: the carrier refuses
    _send(sandbox, "POST /orders/{id}/waybills", 201, id=order_id, body={})
    window = _window(sandbox, order_id)
    pickup = _send(sandbox, "POST /orders/{id}/schedule_pickups", 201, id=order_id,
                   body={"scheduled_pickup": window})  # fmt: skip
    assert pickup["scheduled_pickup"]["error_message"] is None
    order = _send(sandbox, "GET /orders/{id}", 200, id=order_id)["order"]
    assert order["status"] == "awaiting_pickup"
    assert _send(sandbox, "DELETE /orders/{id}", 200, id=order_id)["success"] is True
    _send(sandbox, "DELETE /orders/{id}", 404, id=order_id + 10_000)


def test_a_hub_shipment_answers_as_documented(sandbox: ThreadedSandbox) -> None:
    body = quote_body(destination_country_id=276, hub_transit=True)
    quote = _send(sandbox, "POST /quotes", 201, body=body)["quote"]
    again = _send(sandbox, "GET /quotes/{id}", 200, id=quote["id"])["quote"]
    assert "billable_weights" in again["estimates"][0]
    order_id = _order(sandbox, quote["estimates"][0]["estimate_id"], 276)
    order = _send(sandbox, "POST /orders/{id}/waybills", 201, id=order_id, body={})["order"]
    assert [leg["waybill"] != "" for leg in order["shipments"]] == [True, True]
    _send(sandbox, "GET /orders/{id}/pickup_availabilities", 200, id=order_id)
    sandbox.control("POST", f"/orders/{order_id}/status", {"status": "in_transit"})
    _send(sandbox, "DELETE /orders/{id}", 422, id=order_id)
    _send(sandbox, "POST /orders/{id}/waybills", 201, id=order_id, body={})


def test_the_documented_refusals_answer_as_documented(sandbox: ThreadedSandbox) -> None:
    _send(sandbox, "POST /quotes", 400, body=quote_body(origin_country_id=1))
    _send(sandbox, "POST /quotes", 422, body=quote_body(hub_transit=True))
    _send(sandbox, "GET /quotes/{id}", 404, id=1)
    _send(sandbox, "POST /orders", 400, body=order_body(1))
    estimate = _send(sandbox, "POST /quotes", 201, body=quote_body())["estimates"][0]
    order_id = _order(sandbox, estimate["estimate_id"], 124)
    short = {"time_from": "10:00", "time_to": "10:30", "scheduled_date": "01-01-2000"}
    _send(sandbox, "POST /orders/{id}/schedule_pickups", 400, id=order_id,
          body={"scheduled_pickup": short})  # fmt: skip
    _send(sandbox, "DELETE /orders/{id}", 200, id=order_id)
    _send(sandbox, "POST /orders/{id}/waybills", 422, id=order_id, body={})
    assert _send(sandbox, "GET /orders/{id}/pickup_availabilities", 200, id=order_id) == []
    bad = {"webhook": {"target_url": "ftp://x", "events": ["order.created"]}}
    _send(sandbox, "POST /webhooks", 422, body=bad)


def test_the_order_rate_limit_answers_429_as_documented() -> None:
    # Real time: the second order comes well inside the 60 s window of a limit of one.
    with ThreadedSandbox(speed=1, rate_limit=1) as limited:
        estimate = _send(limited, "POST /quotes", 201, body=quote_body())["estimates"][0]
        _order(limited, estimate["estimate_id"], 124)
        body = order_body(estimate["estimate_id"])
        assert _send(limited, "POST /orders", 429, body=body)["error"] == "1 of 1 in 60 seconds"


def test_a_webhook_lifecycle_answers_as_documented(sandbox: ThreadedSandbox) -> None:
    events = ["shipment.updated.status"]
    body = {"webhook": {"target_url": SINK, "events": events}}
    webhook = _send(sandbox, "POST /webhooks", 201, body=body)["webhook"]
    _send(sandbox, "GET /webhooks/{id}", 200, id=webhook["id"])
    body["webhook"]["events"] = ["shipment.updated.waybill"]
    for operation in ("PUT /webhooks/{id}", "PATCH /webhooks/{id}"):
        replaced = _send(sandbox, operation, 200, id=webhook["id"], body=body)["webhook"]
        assert replaced["token"] == webhook["token"]
    _send(sandbox, "PUT /webhooks/{id}", 422, id=webhook["id"], body={"webhook": {}})
    _send(sandbox, "DELETE /webhooks/{id}", 200, id=webhook["id"])
    _send(sandbox, "GET /webhooks/{id}", 404, id=webhook["id"])


def test_the_served_document_is_the_packaged_valid_openapi_31(sandbox: ThreadedSandbox) -> None:
    served = requests.get(f"{sandbox.root}/_sandbox/openapi.json", headers=AUTH, timeout=10)
    assert served.headers["Content-Type"].startswith("application/json")
    assert served.json() == _document()
    loaded = schemathesis.openapi.from_dict(served.json())
    loaded.validate()  # against the OpenAPI 3.1 meta-schema
    assert len(list(loaded.get_all_operations())) == 13


def test_the_document_needs_the_same_bearer_token_as_the_api(sandbox: ThreadedSandbox) -> None:
    anonymous = requests.get(f"{sandbox.root}/_sandbox/openapi.json", timeout=10)
    assert anonymous.status_code == 401


@pytest.mark.parametrize(
    "token", [pytest.param(None, id="missing"), pytest.param("wrong", id="invalid")]
)
def test_every_operation_answers_401_in_the_documented_form_without_a_valid_token(
    sandbox: ThreadedSandbox, token: str | None
) -> None:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    for result in SCHEMA.get_all_operations():
        operation = result.ok()
        path = operation.path.replace("{id}", "1")
        response = requests.request(
            operation.method, sandbox.base_url + path, json={}, headers=headers, timeout=10
        )
        assert response.status_code == 401, operation.label
        operation.validate_response(response)


def test_webhook_deliveries_carry_the_documented_event_body(sandbox: ThreadedSandbox) -> None:
    # One webhook per event: the first failed delivery (nobody listens) marks a webhook
    # failing, and a failing webhook gets no further events.
    events = ["shipment.updated.status", "shipment.updated.waybill"]
    hooks = {
        _send(sandbox, "POST /webhooks", 201, body={"webhook": {"target_url": SINK,
              "events": [event]}})["webhook"]["id"]
        for event in events
    }  # fmt: skip
    estimate = _send(sandbox, "POST /quotes", 201, body=quote_body())["estimates"][0]
    order_id = _order(sandbox, estimate["estimate_id"], 124)
    _send(sandbox, "POST /orders/{id}/waybills", 201, id=order_id, body={})
    deliveries = sandbox.control("GET", "/deliveries")["deliveries"]
    bodies = [record["body"] for record in deliveries if record["webhook_id"] in hooks]
    assert sorted(body["event_type"] for body in bodies) == events
    document = _document()
    event = jsonschema_rs.validator_for({**document, "$ref": "#/components/schemas/EventDelivery"})
    for body in bodies:
        event.validate(body)
