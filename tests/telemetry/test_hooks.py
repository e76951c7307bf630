"""The client hooks: what an observer hears of calls, attempts, retries, 429s and permits."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from aioresponses import aioresponses
from resources.support import BASE_URL, MockAPI, make_client, order, order_request, reply

from shipping_async import ClientHooks
from shipping_async._hooks import Subscribers, _Observed, current_call, observe_call, route_of
from shipping_async._retry import Operation
from shipping_async.clock import ManualClock
from shipping_async.errors import APIConnectionError, InternalServerError, OrderOutcomeUnknownError
from shipping_async.limiter import RollingWindowLimiter

from .support import Recorder

ORDER_7001 = BASE_URL + "/orders/7001"


@pytest.fixture
def mock() -> Any:
    with MockAPI() as mocked:
        yield mocked


@pytest.mark.parametrize(
    ("path", "route"),
    [
        pytest.param("/orders/7001", "/orders/{id}", id="id-last"),
        pytest.param("/orders/12/schedule_pickups", "/orders/{id}/schedule_pickups", id="mid"),
        pytest.param("/quotes", "/quotes", id="no-id"),
        pytest.param("/webhooks/5", "/webhooks/{id}", id="webhook"),
    ],
)
def test_a_path_becomes_its_route_template(path: str, route: str) -> None:
    assert route_of(path) == route


async def test_a_retried_get_is_one_call_of_two_attempts(mock: aioresponses) -> None:
    mock.get(ORDER_7001, status=503, body=b"")
    mock.get(ORDER_7001, payload={"order": order()})
    recorder = Recorder()

    async with make_client(hooks=[recorder]) as client:
        await client.orders.get(7001)

    assert recorder.events == [
        ("call_start", "get_order", "GET", "/orders/{id}"),
        ("request", 1),
        ("response", 503, None),
        ("retry", "server_error"),
        ("request", 2),
        ("response", 200, None),
        ("call_end", 200, 1, "NoneType"),
    ]


async def test_the_real_success_status_is_reported(mock: aioresponses) -> None:
    mock.post(BASE_URL + "/orders", status=201, payload={"order": order()})
    recorder = Recorder()

    async with make_client(hooks=[recorder]) as client:
        await client.orders.create(order_request())

    assert ("response", 201, None) in recorder.events
    assert recorder.events[-1] == ("call_end", 201, 0, "NoneType")


async def test_a_429_on_an_order_reports_the_rate_the_pause_and_balanced_permits(
    mock: aioresponses,
) -> None:
    clock = ManualClock(auto_advance=True)
    limiter = RollingWindowLimiter(20, 60.0, clock=clock)
    answers = iter([reply(429, {"success": False, "error": "5 of 5 in 90 seconds", "errors": []})])

    def server(url: Any, **kwargs: Any) -> Any:
        return next(answers, reply(201, {"order": order()}))

    mock.post(BASE_URL + "/orders", callback=server, repeat=True)
    recorder = Recorder()
    async with make_client(clock=clock, order_limiter=limiter, hooks=[recorder]) as client:
        await client.orders.create(order_request())

    assert recorder.names() == [
        "call_start",
        "permit_waiting",
        "permit_granted",
        "request",
        "response",
        "rate_limited",
        "permit_released",
        "paused",
        "permit_waiting",
        "permit_granted",
        "retry",
        "request",
        "response",
        "permit_released",
        "call_end",
    ]
    assert ("rate_limited", 5, 90.0) in recorder.events
    assert ("retry", "rate_limited") in recorder.events
    assert ("paused", True) in recorder.events


async def test_an_order_without_an_answer_is_reported_as_outcome_unknown(
    mock: aioresponses,
) -> None:
    mock.post(BASE_URL + "/orders", exception=aiohttp.ServerDisconnectedError())
    recorder = Recorder()

    async with make_client(hooks=[recorder]) as client:
        with pytest.raises(OrderOutcomeUnknownError):
            await client.orders.create(order_request())

    assert ("response", None, "ServerDisconnectedError") in recorder.events
    assert ("outcome_unknown", "create_order") in recorder.events
    assert recorder.events[-1] == ("call_end", None, 0, "OrderOutcomeUnknownError")


async def test_every_hook_of_every_subscriber_is_called(mock: aioresponses) -> None:
    mock.get(ORDER_7001, status=500, body=b"", repeat=True)
    first, second = Recorder(), Recorder()

    async with make_client(hooks=[first, second], max_retries=1) as client:
        with pytest.raises(InternalServerError):
            await client.orders.get(7001)

    assert first.events == second.events
    assert first.events[-1] == ("call_end", 500, 1, "InternalServerError")


async def test_hooks_that_override_nothing_change_nothing(mock: aioresponses) -> None:
    mock.get(ORDER_7001, payload={"order": order()})

    async with make_client(hooks=[ClientHooks()]) as client:
        assert (await client.orders.get(7001)).id == order()["id"]


async def test_copies_keep_the_hooks(mock: aioresponses) -> None:
    mock.get(ORDER_7001, payload={"order": order()})
    recorder = Recorder()

    async with make_client(hooks=[recorder]) as client:
        await client.with_options(timeout=5).orders.get(7001)

    assert recorder.names()[0] == "call_start"


def _events() -> list[tuple[str, object]]:
    refused = aiohttp.ClientConnectorError(
        SimpleNamespace(host="h", port=1), ConnectionRefusedError(111, "refused")
    )
    unreachable = APIConnectionError("refused", method="GET", path="/orders/7001")
    unreachable.__cause__ = refused
    failed = InternalServerError(
        status=502, error="", errors=[], body=b"", method="GET", path="/orders/7001"
    )
    return [
        ("sending", None),
        ("answered", unreachable),
        ("sending", None),
        ("status", 502),
        ("answered", failed),
        ("sending", None),
        ("status", 200),
        ("answered", None),
    ]


def test_a_client_without_hooks_keeps_the_call_record_as_one_with_hooks() -> None:
    # Without hooks a lighter observer keeps only what the log lines read: it must keep
    # it exactly as the full one does, event after event.
    operation = Operation(name="get_order", method="GET", path="/orders/7001", route="/orders/{id}")
    quiet = observe_call(Subscribers(), operation)
    full = _Observed(Subscribers([Recorder()]), operation)
    assert not isinstance(quiet, _Observed)
    seen: dict[str, list[tuple[int, int | None, str | None]]] = {"quiet": [], "full": []}
    for name, observer in (("quiet", quiet), ("full", full)):
        with observer:
            for event, argument in _events():
                getattr(observer, event)(*(() if event == "sending" else (argument,)))
                call = current_call()
                assert call is not None
                seen[name].append((call.attempts, call.status, call.error))
        assert current_call() is None
    assert seen["quiet"] == seen["full"]
    assert seen["quiet"][1] == (1, None, "ClientConnectorError")
    assert seen["quiet"][-1] == (3, 200, None)


def test_a_call_record_handed_to_a_log_line_follows_the_call() -> None:
    # The quiet observer makes its record only when asked; a record handed out (a log
    # handler may keep it) then follows the call as the full observer's does.
    operation = Operation(name="get_order", method="GET", path="/orders/7001", route="/orders/{id}")
    quiet = observe_call(Subscribers(), operation)
    with quiet:
        quiet.sending()
        kept = current_call()
        assert kept is not None
        assert (kept.operation, kept.route, kept.attempts) == ("get_order", "/orders/{id}", 1)
        quiet.status(503)
        quiet.sending()
        quiet.status(200)
        quiet.answered(None)
        assert current_call() is kept
    assert (kept.attempts, kept.status, kept.error) == (2, 200, None)
