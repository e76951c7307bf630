"""The retry rules: what is re-sent, after how long (on the client's clock), what is raised."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import aiohttp
import pytest
from aiolimiter import AsyncLimiter
from aioresponses import aioresponses
from resources.support import (
    BASE_URL,
    FakeLimiter,
    MockAPI,
    calls,
    connect_refused,
    direct_quote,
    make_client,
    order,
    order_request,
    quote_request,
    reply,
    scheduled_pickup,
    webhook,
)

from shipping_async._retry import (
    Operation,
    Retry,
    RetryPolicy,
    decide,
    never_written,
    parse_retry_after,
)
from shipping_async.clock import ManualClock
from shipping_async.errors import (
    APIConnectionError,
    APIError,
    APIResponseValidationError,
    APITimeoutError,
    BadRequestError,
    InternalServerError,
    OrderOutcomeUnknownError,
    OutcomeUnknownError,
    RateLimitError,
    error_for_status,
)
from shipping_async.limiter import RollingWindowLimiter
from shipping_async.models import SchedulePickupRequest

ORDER_7001 = BASE_URL + "/orders/7001"


@pytest.fixture
def mock() -> Any:
    with MockAPI() as mocked:
        yield mocked


def status_error(status: int, retry_after: float | None = None, text: str = "") -> APIError:
    body = f'{{"success": false, "error": "{text}", "errors": []}}'.encode()
    return error_for_status(status, body, method="X", path="/p", retry_after=retry_after)


def transport_error(cause: BaseException) -> APIConnectionError:
    error = APIConnectionError("failed", method="X", path="/p")
    error.__cause__ = cause
    return error


GET = Operation(name="get_order", method="GET", path="/orders/1")
CREATE_QUOTE = Operation(name="create_quote", method="POST", path="/quotes")
CREATE_ORDER = Operation(
    name="create_order", method="POST", path="/orders", customer_reference="R-1"
)
WAYBILL = Operation(name="create_waybill", method="POST", path="/orders/1/waybills")
POLICY = RetryPolicy(max_retries=2, max_rate_limit_retries=3)


def decided(error: APIError, operation: Operation, **state: Any) -> Retry | Exception:
    state.setdefault("retries", 0)
    state.setdefault("rate_limited", 0)
    state.setdefault("limited", operation.name == "create_order")
    return decide(error, operation, POLICY, **state)


# -- the table -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "name", "idempotent"),
    [
        pytest.param("GET", "get_order", True, id="get"),
        pytest.param("PUT", "update_webhook", True, id="put"),
        pytest.param("PATCH", "update_webhook", True, id="patch"),
        pytest.param("DELETE", "cancel_order", True, id="delete"),
        pytest.param("POST", "create_quote", True, id="post-quotes"),
        pytest.param("POST", "create_order", False, id="post-orders"),
        pytest.param("POST", "create_waybill", False, id="post-waybills"),
        pytest.param("POST", "schedule_pickup", False, id="post-pickups"),
        pytest.param("POST", "create_webhook", False, id="post-webhooks"),
        pytest.param("POST", "something_new", False, id="unknown-post-is-unsafe"),
    ],
)
def test_idempotency_follows_the_method_and_the_operation(
    method: str, name: str, idempotent: bool
) -> None:
    assert Operation(name=name, method=method, path="/p").idempotent is idempotent


@pytest.mark.parametrize(
    ("cause", "written"),
    [
        pytest.param(connect_refused(), False, id="connector"),
        pytest.param(aiohttp.ConnectionTimeoutError(), False, id="connect-timeout"),
        pytest.param(aiohttp.ServerDisconnectedError(), True, id="disconnected"),
        pytest.param(aiohttp.SocketTimeoutError(), True, id="read-timeout"),
        pytest.param(aiohttp.ClientPayloadError(), True, id="payload"),
        pytest.param(aiohttp.ClientOSError(), True, id="os-error"),
        pytest.param(TimeoutError(), True, id="total-timeout"),
    ],
)
def test_only_connect_failures_count_as_never_written(cause: BaseException, written: bool) -> None:
    assert never_written(transport_error(cause)) is not written


def test_an_idempotent_request_is_retried_after_5xx_429_and_any_transport_error() -> None:
    for error in (
        status_error(503),
        status_error(429),
        transport_error(aiohttp.ServerDisconnectedError()),
        transport_error(TimeoutError()),
    ):
        assert decided(error, GET) == Retry()
        assert decided(error, CREATE_QUOTE) == Retry()


def test_a_retry_after_is_passed_on_as_the_wait() -> None:
    assert decided(status_error(503, retry_after=4.0), GET) == Retry(4.0)


def test_a_retry_after_beyond_the_limit_is_not_waited_for() -> None:
    error = status_error(429, retry_after=POLICY.max_retry_after + 1)
    assert decided(error, GET) is error


def test_retries_stop_at_max_retries_with_the_last_error() -> None:
    error = status_error(500)
    assert decided(error, GET, retries=2) is error


def test_client_errors_are_never_retried() -> None:
    for status in (400, 401, 404, 422):
        error = status_error(status)
        assert decided(error, GET) is error


def test_a_non_idempotent_post_is_re_sent_only_when_it_never_left() -> None:
    assert decided(transport_error(connect_refused()), WAYBILL) == Retry()
    assert decided(status_error(429), WAYBILL) == Retry()
    unknown = decided(transport_error(aiohttp.ServerDisconnectedError()), WAYBILL)
    assert isinstance(unknown, OutcomeUnknownError)
    assert not isinstance(unknown, OrderOutcomeUnknownError)
    assert unknown.operation == "create_waybill"


def test_a_5xx_on_a_non_idempotent_post_is_an_unknown_outcome_and_still_a_5xx() -> None:
    error = status_error(502)
    unknown = decided(error, WAYBILL)
    assert isinstance(unknown, InternalServerError)
    assert isinstance(unknown, OutcomeUnknownError)
    assert not isinstance(unknown, OrderOutcomeUnknownError)
    assert (unknown.status, unknown.body, unknown.operation) == (502, error.body, "create_waybill")
    assert unknown.__cause__ is error


def test_a_5xx_on_create_order_is_both_a_5xx_and_an_unknown_order_outcome() -> None:
    error = status_error(504)
    unknown = decided(error, CREATE_ORDER)
    assert isinstance(unknown, InternalServerError)
    assert isinstance(unknown, OrderOutcomeUnknownError)
    assert (unknown.status, unknown.customer_reference) == (504, "R-1")
    assert "R-1" in str(unknown)


def test_an_undecodable_answer_is_raised_for_reads_and_unknown_for_orders() -> None:
    error = APIResponseValidationError("bad", method="GET", path="/p")
    assert decided(error, GET) is error
    unknown = decided(error, CREATE_ORDER)
    assert isinstance(unknown, OrderOutcomeUnknownError)
    assert isinstance(unknown, APIResponseValidationError)
    assert unknown.customer_reference == "R-1"
    assert unknown.__cause__ is error


def test_a_429_on_a_limited_order_pauses_until_the_cap() -> None:
    error = status_error(429, text="20 of 20 in 60 seconds")
    assert decided(error, CREATE_ORDER, retries=5) == Retry(None, pause_limiter=True)
    capped = decided(error, CREATE_ORDER, rate_limited=3)
    assert isinstance(capped, RateLimitError)
    assert "another client" in str(capped)
    assert (capped.count, capped.limit, capped.window) == (20, 20, 60.0)


# -- delays --------------------------------------------------------------------------------


def test_backoff_doubles_from_the_base_up_to_the_cap() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=3.0, jitter=lambda value: value)
    delays = policy.delays()
    assert [next(delays) for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_full_jitter_stays_between_zero_and_the_backoff() -> None:
    delays = RetryPolicy(base_delay=1.0, max_delay=4.0).delays()
    for ceiling in (1.0, 2.0, 4.0, 4.0, 4.0):
        assert 0.0 <= next(delays) <= ceiling


def test_a_policy_refuses_negative_counts_and_delays() -> None:
    with pytest.raises(ValueError, match="max_retries"):
        RetryPolicy(max_retries=-1)
    with pytest.raises(ValueError, match="base_delay"):
        RetryPolicy(base_delay=float("nan"))


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        pytest.param("3", 3.0, id="seconds"),
        pytest.param("0.25", 0.25, id="fraction"),
        pytest.param("-4", 0.0, id="negative"),
        pytest.param("Mon, 05 Jan 2026 09:00:12 GMT", 12.0, id="http-date"),
        pytest.param("Mon, 05 Jan 2026 08:59:00 GMT", 0.0, id="date-in-the-past"),
        pytest.param("soon", None, id="garbage"),
        pytest.param("", None, id="empty"),
        pytest.param(None, None, id="absent"),
    ],
)
def test_retry_after_reads_seconds_and_http_dates(
    header: str | None, seconds: float | None
) -> None:
    now = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    assert parse_retry_after(header, now) == seconds


# -- through the client --------------------------------------------------------------------


async def test_a_read_is_retried_after_5xx_and_timeouts_then_succeeds(mock: aioresponses) -> None:
    mock.get(ORDER_7001, status=503, body=b"busy")
    mock.get(ORDER_7001, exception=aiohttp.SocketTimeoutError("read"))
    mock.get(ORDER_7001, payload={"order": order()})

    async with make_client(max_retries=2) as client:
        got = await client.orders.get(7001)

    assert got.id == 7001
    assert calls(mock, "GET", "/orders/7001") == 3


async def test_a_read_gives_up_after_max_retries(mock: aioresponses) -> None:
    mock.get(ORDER_7001, status=500, body=b"boom", repeat=True)

    async with make_client(max_retries=2) as client:
        with pytest.raises(InternalServerError):
            await client.orders.get(7001)

    assert calls(mock, "GET", "/orders/7001") == 3


async def test_max_retries_per_call_overrides_the_client(mock: aioresponses) -> None:
    mock.get(ORDER_7001, exception=aiohttp.ServerDisconnectedError(), repeat=True)

    async with make_client(max_retries=5) as client:
        with pytest.raises(APIConnectionError):
            await client.orders.get(7001, max_retries=0)

    assert calls(mock, "GET", "/orders/7001") == 1


async def test_a_timeout_is_raised_as_api_timeout_error_from_aiohttps(mock: aioresponses) -> None:
    failure = aiohttp.SocketTimeoutError("read")
    mock.get(ORDER_7001, exception=failure)

    async with make_client(max_retries=0) as client:
        with pytest.raises(APITimeoutError) as caught:
            await client.orders.get(7001)

    assert isinstance(caught.value, TimeoutError)
    assert caught.value.__cause__ is failure


async def test_post_quotes_is_retried_like_a_read(mock: aioresponses) -> None:
    mock.post(BASE_URL + "/quotes", exception=aiohttp.ServerDisconnectedError())
    mock.post(BASE_URL + "/quotes", status=201, payload=direct_quote())

    async with make_client() as client:
        await client.quotes.create(quote_request())

    assert calls(mock, "POST", "/quotes") == 2


async def test_a_waybill_post_is_not_retried_after_a_5xx(mock: aioresponses) -> None:
    mock.post(ORDER_7001 + "/waybills", status=500, body=b"boom", repeat=True)

    async with make_client() as client:
        with pytest.raises(InternalServerError):
            await client.orders.create_waybill(7001)

    assert calls(mock, "POST", "/orders/7001/waybills") == 1


async def test_a_pickup_post_after_a_dropped_connection_is_an_unknown_outcome(
    mock: aioresponses,
) -> None:
    url = ORDER_7001 + "/schedule_pickups"
    mock.post(url, exception=aiohttp.ServerDisconnectedError())
    mock.post(url, status=201, payload={"scheduled_pickup": scheduled_pickup()})
    request = SchedulePickupRequest(
        scheduled_date=datetime(2026, 1, 7).date(),
        time_from=datetime(2026, 1, 7, 10).time(),
        time_to=datetime(2026, 1, 7, 12).time(),
    )

    async with make_client() as client:
        with pytest.raises(OutcomeUnknownError) as caught:
            await client.orders.schedule_pickup(7001, request)

    assert caught.value.operation == "schedule_pickup"
    assert calls(mock, "POST", "/orders/7001/schedule_pickups") == 1


async def test_a_429_on_webhook_registration_is_re_sent(mock: aioresponses) -> None:
    mock.post(BASE_URL + "/webhooks", status=429, body=b"slow down")
    mock.post(BASE_URL + "/webhooks", status=201, payload={"webhook": webhook()})

    async with make_client() as client:
        await client.webhooks.create("https://hooks.example.test/x", ["shipment.updated.status"])

    assert calls(mock, "POST", "/webhooks") == 2


async def test_retry_after_seconds_is_waited_on_the_clients_clock(mock: aioresponses) -> None:
    clock = ManualClock(auto_advance=True)
    mock.get(ORDER_7001, status=429, body=b"", headers={"Retry-After": "3"})
    mock.get(ORDER_7001, payload={"order": order()})

    async with make_client(clock=clock, retry_base_delay=100.0) as client:
        await client.orders.get(7001)

    assert clock.monotonic() == 3.0  # not the 100 s backoff


async def test_retry_after_as_an_http_date_is_waited_until(mock: aioresponses) -> None:
    clock = ManualClock(auto_advance=True)
    when = format_datetime(clock.now() + timedelta(seconds=5), usegmt=True)
    mock.get(ORDER_7001, status=503, body=b"", headers={"Retry-After": when})
    mock.get(ORDER_7001, payload={"order": order()})

    async with make_client(clock=clock, retry_base_delay=100.0) as client:
        await client.orders.get(7001)

    assert clock.monotonic() == 5.0


async def test_backoff_waits_go_through_the_clock_not_real_time(mock: aioresponses) -> None:
    clock = ManualClock()  # no auto-advance: nothing moves unless the test says so
    mock.get(ORDER_7001, status=503, body=b"")
    mock.get(ORDER_7001, payload={"order": order()})

    async with make_client(clock=clock, retry_base_delay=30.0, retry_max_delay=30.0) as client:
        task = asyncio.create_task(client.orders.get(7001))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not task.done()
        assert calls(mock, "GET", "/orders/7001") == 1
        clock.advance(30.0)
        started = time.monotonic()
        await task

    assert time.monotonic() - started < 1.0
    assert calls(mock, "GET", "/orders/7001") == 2


async def test_cancelling_during_a_backoff_wait_sends_nothing_more(mock: aioresponses) -> None:
    clock = ManualClock()
    mock.get(ORDER_7001, status=503, body=b"", repeat=True)

    async with make_client(clock=clock) as client:
        task = asyncio.create_task(client.orders.get(7001))
        for _ in range(20):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        clock.advance(100.0)

    assert calls(mock, "GET", "/orders/7001") == 1


async def test_cancelling_an_order_waiting_for_a_permit_takes_no_permit(
    mock: aioresponses,
) -> None:
    clock = ManualClock()
    limiter = RollingWindowLimiter(1, 60.0, clock=clock)
    held = await limiter.acquire()

    async with make_client(clock=clock, order_limiter=limiter) as client:
        task = asyncio.create_task(client.orders.create(order_request()))
        for _ in range(10):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    await limiter.release(held, sent=False)
    assert limiter.available() == 1
    assert calls(mock, "POST", "/orders") == 0


async def test_cancelling_an_order_on_the_wire_counts_it_as_sent(mock: aioresponses) -> None:
    limiter = FakeLimiter()
    on_the_wire, answer = asyncio.Event(), asyncio.Event()

    async def slow(url: Any, **kwargs: Any) -> Any:
        on_the_wire.set()
        await answer.wait()
        return reply(201, {"order": order()})

    mock.post(BASE_URL + "/orders", callback=slow)
    async with make_client(order_limiter=limiter) as client:
        task = asyncio.create_task(client.orders.create(order_request()))
        await on_the_wire.wait()
        task.cancel()
        for _ in range(10):
            await asyncio.sleep(0)
        assert not task.done(), "the caller's cancellation abandoned the answer"
        answer.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    assert limiter.calls == [("acquire", False), ("release", "1", True)]


async def test_the_request_rate_limiter_paces_every_attempt_except_orders(
    mock: aioresponses,
) -> None:
    class Counting(AsyncLimiter):
        acquired = 0

        async def acquire(self, amount: float = 1) -> None:
            self.acquired += 1
            await super().acquire(amount)

    rate = Counting(100, 1)
    mock.get(ORDER_7001, exception=connect_refused())
    mock.get(ORDER_7001, payload={"order": order()})
    mock.post(BASE_URL + "/orders", status=201, payload={"order": order()})

    async with make_client(request_rate_limiter=rate) as client:
        await client.orders.get(7001)
        await client.orders.create(order_request())

    assert rate.acquired == 2  # both GET attempts; the order has its own limiter


async def test_a_bad_request_is_not_retried(mock: aioresponses) -> None:
    mock.get(ORDER_7001, status=400, payload={"success": False, "error": "Invalid input"})

    async with make_client() as client:
        with pytest.raises(BadRequestError):
            await client.orders.get(7001)

    assert calls(mock, "GET", "/orders/7001") == 1


async def test_a_limited_order_is_re_sent_after_the_server_pause(mock: aioresponses) -> None:
    clock = ManualClock(auto_advance=True)
    limiter = RollingWindowLimiter(20, 60.0, margin=0.5, clock=clock)
    moments: list[float] = []

    def server(url: Any, **kwargs: Any) -> Any:
        moments.append(clock.monotonic())
        if len(moments) == 1:
            return reply(429, {"success": False, "error": "5 of 5 in 30 seconds", "errors": []})
        return reply(201, {"order": order()})

    mock.post(BASE_URL + "/orders", callback=server, repeat=True)
    async with make_client(clock=clock, order_limiter=limiter) as client:
        await client.orders.create(order_request())

    assert moments[1] - moments[0] >= 30.0
    assert limiter.limit == 5  # the stricter limit from the text is adopted
    assert limiter.window == 60.0  # ... but a shorter window is not
