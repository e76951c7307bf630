"""Bearer authentication on every API and control endpoint."""

from __future__ import annotations

import pytest

from .support import Api, quote_body

ENDPOINTS = [
    pytest.param("POST", "/quotes", id="create-quote"),
    pytest.param("GET", "/quotes/1", id="get-quote"),
    pytest.param("POST", "/orders", id="create-order"),
    pytest.param("GET", "/orders/1", id="get-order"),
    pytest.param("DELETE", "/orders/1", id="cancel-order"),
    pytest.param("POST", "/orders/1/waybills", id="waybills"),
    pytest.param("GET", "/orders/1/pickup_availabilities", id="availabilities"),
    pytest.param("POST", "/orders/1/schedule_pickups", id="schedule-pickup"),
    pytest.param("POST", "/webhooks", id="create-webhook"),
    pytest.param("GET", "/webhooks/1", id="get-webhook"),
    pytest.param("PUT", "/webhooks/1", id="put-webhook"),
    pytest.param("PATCH", "/webhooks/1", id="patch-webhook"),
    pytest.param("DELETE", "/webhooks/1", id="delete-webhook"),
    pytest.param("GET", "/_sandbox/requests", id="control-requests"),
    pytest.param("POST", "/_sandbox/reset", id="control-reset"),
    pytest.param("POST", "/_sandbox/faults", id="control-faults"),
]


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
async def test_missing_token_is_401_with_error_body(api: Api, method: str, path: str) -> None:
    reply = await api.call(method, path, headers={"Authorization": ""}, json={})
    assert reply.status == 401
    body = reply.body
    assert body["success"] is False
    assert body["errors"] == []
    assert isinstance(body["error"], str)
    assert body["error"]


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
async def test_wrong_token_is_401(api: Api, method: str, path: str) -> None:
    reply = await api.call(method, path, token="not-the-token", json={})
    assert reply.status == 401
    assert reply.body == {"success": False, "error": "Access token invalid", "errors": []}


async def test_other_schemes_and_no_header_are_refused(api: Api) -> None:
    basic = await api.call(
        "POST", "/quotes", headers={"Authorization": f"Basic {api.server.token}"}
    )
    url = api.url("/quotes")
    async with api.session.post(url, json=quote_body()) as response:
        missing = response.status, await response.json()
    assert basic.status == 401
    assert missing[0] == 401
    assert "Authorization: Bearer" in missing[1]["error"]


async def test_error_text_never_contains_the_token(api: Api) -> None:
    wrong = api.server.token + "x"
    reply = await api.call("POST", "/quotes", token=wrong, json=quote_body())
    assert api.server.token not in reply.text
    assert wrong not in reply.text


async def test_valid_token_passes(api: Api) -> None:
    reply = await api.call("POST", "/quotes", json=quote_body())
    assert reply.status == 201


async def test_unknown_route_answers_json_404(api: Api) -> None:
    reply = await api.call("GET", "/nothing-here")
    assert reply.status == 404
    assert reply.body == {"success": False, "error": "Not Found", "errors": []}


async def test_wrong_method_answers_json_405(api: Api) -> None:
    reply = await api.call("GET", "/webhooks")
    assert reply.status == 405
    assert reply.body == {"success": False, "error": "Method Not Allowed", "errors": []}
    assert "POST" in reply.headers["Allow"]
