"""AsyncShippingClient: options and environment, HTTPS, token hygiene, sessions, copies."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import traceback
from typing import Any

import aiohttp
import pytest
from aioresponses import aioresponses
from resources.support import (
    BASE_URL,
    TOKEN,
    FakeLimiter,
    MockAPI,
    calls,
    connect_refused,
    make_client,
    order,
    order_request,
)
from yarl import URL

from shipping_async import _http
from shipping_async._client import AsyncShippingClient
from shipping_async.clock import ManualClock, SystemClock
from shipping_async.errors import (
    APIConnectionError,
    APIResponseValidationError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConfigurationError,
    OrderOutcomeUnknownError,
    ShippingError,
)
from shipping_async.limiter import RollingWindowLimiter
from shipping_async.sandbox import SandboxServer

ORDER_7001 = BASE_URL + "/orders/7001"


@pytest.fixture
def mock() -> Any:
    with MockAPI() as mocked:
        yield mocked


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "SHIPPING_ACCESS_TOKEN",
        "SHIPPING_BASE_URL",
        "SHIPPING_LOG",
        "SHIPPING_CLOCK_SPEED",
    ):
        monkeypatch.delenv(name, raising=False)


# -- options and environment ---------------------------------------------------------------


async def test_token_and_base_url_fall_back_to_the_environment(
    monkeypatch: pytest.MonkeyPatch, mock: aioresponses
) -> None:
    monkeypatch.setenv("SHIPPING_ACCESS_TOKEN", "env-token")
    monkeypatch.setenv("SHIPPING_BASE_URL", BASE_URL + "/")
    mock.get(ORDER_7001, payload={"order": order()})

    async with AsyncShippingClient() as client:
        await client.orders.get(7001)

    assert client.base_url == BASE_URL
    call = mock.requests[("GET", aiohttp.client.URL(ORDER_7001))][0]
    assert call.kwargs["headers"]["Authorization"] == "Bearer env-token"


async def test_explicit_arguments_win_over_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SHIPPING_BASE_URL", "https://other.test/client_api/v2")
    client = AsyncShippingClient("t", base_url=BASE_URL)
    assert client.base_url == BASE_URL


async def test_a_missing_token_is_a_clear_error_at_construction() -> None:
    with pytest.raises(ConfigurationError, match="SHIPPING_ACCESS_TOKEN"):
        AsyncShippingClient(base_url=BASE_URL)


async def test_a_missing_base_url_is_a_clear_error_at_construction() -> None:
    with pytest.raises(ConfigurationError, match="SHIPPING_BASE_URL"):
        AsyncShippingClient("t")


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("http://api.shipping.test/client_api/v2", id="plain-http"),
        pytest.param("http://10.0.0.5/client_api/v2", id="private-ip"),
        pytest.param("http://localhost.evil.test/client_api/v2", id="lookalike"),
        pytest.param("ftp://api.shipping.test/client_api/v2", id="ftp"),
        pytest.param("/client_api/v2", id="relative"),
    ],
)
async def test_anything_but_https_or_loopback_is_refused(url: str) -> None:
    with pytest.raises(ConfigurationError, match="base_url"):
        AsyncShippingClient("t", base_url=url)


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("http://127.0.0.1:8080/client_api/v2", id="ipv4-loopback"),
        pytest.param("http://127.5.6.7/client_api/v2", id="loopback-range"),
        pytest.param("http://[::1]:9000/client_api/v2", id="ipv6-loopback"),
        pytest.param("http://localhost:8000/client_api/v2", id="localhost"),
        pytest.param("https://api.shipping.test/client_api/v2", id="https"),
    ],
)
async def test_https_and_loopback_http_are_accepted(url: str) -> None:
    assert AsyncShippingClient("t", base_url=url).base_url == url


@pytest.mark.parametrize(
    "base_url",
    [
        pytest.param("http://127.0.0.1:8080/client_api/v2", id="path"),
        pytest.param("http://127.0.0.1:8080/client_api/v2/", id="trailing-slash"),
        pytest.param("http://127.0.0.1:8080", id="no-path"),
        pytest.param("http://[::1]:9000/client%20api/v2", id="ipv6-encoded-path"),
        pytest.param("https://user:pw@api.shipping.test/v2", id="user-info"),
        pytest.param("https://api.shipping.test/v2?tenant=7", id="query"),
    ],
)
@pytest.mark.parametrize("path", ["/quotes", "/orders/7001/waybills", "/webhooks/3"])
async def test_a_request_url_is_the_base_url_and_the_path(base_url: str, path: str) -> None:
    client = AsyncShippingClient("t", base_url=base_url)
    expected = URL(client.base_url + path)
    assert URL(client._url(path)) == expected
    assert str(client._url(path)) == str(expected)


def test_a_configuration_error_is_a_shipping_error_and_a_value_error() -> None:
    assert issubclass(ConfigurationError, ShippingError)
    assert issubclass(ConfigurationError, ValueError)


async def test_bad_timeouts_and_retry_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="timeout"):
        AsyncShippingClient("t", base_url=BASE_URL, timeout=0)
    with pytest.raises(ValueError, match="max_retries"):
        AsyncShippingClient("t", base_url=BASE_URL, max_retries=-1)


async def test_an_unknown_per_call_option_is_refused(mock: aioresponses) -> None:
    async with make_client() as client:
        with pytest.raises(TypeError, match="timout"):
            await client.orders.get(7001, timout=3)  # type: ignore[call-arg]


async def _no_answer(url: URL, **kwargs: Any) -> None:
    await asyncio.Event().wait()


async def test_a_per_call_timeout_limits_the_attempt(mock: aioresponses) -> None:
    # The client's own limit (not aiohttp's per-request timer) keeps the attempt's time.
    mock.get(ORDER_7001, callback=_no_answer)

    async with make_client(timeout=30, max_retries=0) as client, asyncio.timeout(10):
        with pytest.raises(APITimeoutError, match=r"no answer within 0\.05 s") as raised:
            await client.orders.get(7001, timeout=0.05)

    assert isinstance(raised.value.__cause__, TimeoutError)
    call = mock.requests[("GET", aiohttp.client.URL(ORDER_7001))][0]
    assert call.kwargs["timeout"] == aiohttp.ClientTimeout()  # aiohttp's timer left off


async def test_a_cancellation_within_the_time_limit_stays_a_cancellation(
    mock: aioresponses,
) -> None:
    started = asyncio.Event()

    async def answer_later(url: URL, **kwargs: Any) -> None:
        started.set()
        await asyncio.Event().wait()

    mock.get(ORDER_7001, callback=answer_later)

    async with make_client(timeout=30, max_retries=0) as client:
        call = asyncio.ensure_future(client.orders.get(7001))
        await started.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call


async def test_the_default_limiter_is_the_apis_rate_on_the_clients_clock() -> None:
    clock = ManualClock()
    client = AsyncShippingClient("t", base_url=BASE_URL, clock=clock)

    limiter = client.order_limiter
    assert isinstance(limiter, RollingWindowLimiter)
    assert (limiter.limit, limiter.window) == (20, 60.0)
    assert client.clock is clock
    assert isinstance(AsyncShippingClient("t", base_url=BASE_URL).clock, SystemClock)


# -- the token never shows -----------------------------------------------------------------


async def test_the_token_is_not_in_the_repr() -> None:
    client = make_client()
    assert TOKEN not in repr(client)
    assert "***" in repr(client)
    assert TOKEN not in repr(vars(client))


async def test_the_token_is_not_in_debug_logs(
    mock: aioresponses, caplog: pytest.LogCaptureFixture
) -> None:
    mock.get(ORDER_7001, status=503, body=b"")
    mock.get(ORDER_7001, payload={"order": order()})

    with caplog.at_level(logging.DEBUG, logger="shipping_async"):
        async with make_client() as client:
            await client.orders.get(7001)

    text = "\n".join(record.getMessage() for record in caplog.records)
    assert "Bearer ***" in text  # the headers are logged, redacted
    assert "retrying GET /orders/7001" in text
    assert TOKEN not in text


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(
            {"status": 401, "payload": {"success": False, "error": "Bad token"}}, id="401"
        ),
        pytest.param({"exception": aiohttp.ServerDisconnectedError()}, id="unknown-outcome"),
        pytest.param({"exception": connect_refused()}, id="connect"),
    ],
)
async def test_the_token_is_not_in_exception_texts_or_tracebacks(
    mock: aioresponses, failure: dict[str, Any]
) -> None:
    mock.post(BASE_URL + "/orders", repeat=True, **failure)

    async with make_client(max_retries=0) as client:
        with pytest.raises(ShippingError) as caught:
            await client.orders.create(order_request())

    assert isinstance(
        caught.value, AuthenticationError | OrderOutcomeUnknownError | APIConnectionError
    )
    rendered = "".join(traceback.format_exception(caught.value))
    assert TOKEN not in rendered
    assert TOKEN not in repr(caught.value)
    chain: BaseException | None = caught.value
    while chain is not None:
        assert TOKEN not in str(chain)
        chain = chain.__cause__


async def test_a_token_echoed_in_an_error_body_is_scrubbed(mock: aioresponses) -> None:
    echo = f'{{"success": false, "error": "bad header Authorization: Bearer {TOKEN}"}}'
    mock.get(ORDER_7001, status=400, body=echo.encode())

    async with make_client() as client:
        with pytest.raises(ShippingError) as caught:
            await client.orders.get(7001)

    assert TOKEN not in str(caught.value)
    assert "Bearer ***" in str(caught.value)


async def test_an_error_carries_the_answers_status_headers_and_body(mock: aioresponses) -> None:
    answer = b'{"success": false, "error": "Invalid input, object invalid"}'
    headers = {"X-Sandbox-Detail": "order.city: must not be empty", "X-Echo": f"Bearer {TOKEN}"}
    mock.get(ORDER_7001, status=400, body=answer, headers=headers)

    async with make_client() as client:
        with pytest.raises(BadRequestError) as caught:
            await client.orders.get(7001)

    error = caught.value
    assert (error.status, error.body) == (400, answer)
    assert error.headers["x-sandbox-detail"] == "order.city: must not be empty"
    assert error.headers["X-Echo"] == "Bearer ***"
    assert "Authorization" not in error.headers  # the request's headers never come along


async def test_an_undecodable_answer_carries_it_too(mock: aioresponses) -> None:
    mock.get(ORDER_7001, status=200, body=b'{"order": ', headers={"X-Request-Id": "r-1"})

    async with make_client() as client:
        with pytest.raises(APIResponseValidationError) as caught:
            await client.orders.get(7001)

    error = caught.value
    assert (error.status, error.body, error.headers["x-request-id"]) == (200, b'{"order": ', "r-1")


def test_the_secret_hides_itself() -> None:
    secret = _http.Secret(TOKEN)
    assert TOKEN not in f"{secret} {secret!r}"
    assert secret.reveal() == TOKEN


# -- logging -------------------------------------------------------------------------------


async def test_shipping_log_debug_turns_on_a_debug_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    logger = logging.getLogger("shipping_async")
    monkeypatch.setattr(logger, "handlers", [])
    monkeypatch.setattr(logger, "level", logging.NOTSET)
    monkeypatch.setenv("SHIPPING_LOG", "debug")

    make_client()
    make_client()

    assert logger.level == logging.DEBUG
    assert len(logger.handlers) == 1


async def test_without_shipping_log_no_handler_is_added(monkeypatch: pytest.MonkeyPatch) -> None:
    logger = logging.getLogger("shipping_async")
    before = list(logger.handlers)

    make_client()

    assert logger.handlers == before
    assert all(isinstance(handler, logging.NullHandler) for handler in before)


def test_the_library_prints_nothing_when_logging_is_unconfigured() -> None:
    # A real warning of the library (the limiter learning a stricter rate) in a fresh
    # interpreter where the application configured no logging at all.
    code = (
        "import asyncio, logging\n"
        "from shipping_async import RollingWindowLimiter\n"
        "async def main():\n"
        "    await RollingWindowLimiter(20, 60).pause(0, limit=5)\n"
        "asyncio.run(main())\n"
        "logging.getLogger('shipping_async.limiter').error('an error too')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "SHIPPING_LOG"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert done.stderr == ""
    assert done.stdout == ""


# -- sessions and copies -------------------------------------------------------------------


async def test_a_session_passed_in_is_used_and_not_closed(mock: aioresponses) -> None:
    mock.get(ORDER_7001, payload={"order": order()})
    async with aiohttp.ClientSession() as session:
        client = make_client(session=session)
        await client.orders.get(7001)
        assert client._sessions.get() is session

        await client.close()

        assert not session.closed


async def test_an_own_session_is_made_once_and_closed_on_exit(mock: aioresponses) -> None:
    mock.get(ORDER_7001, payload={"order": order()}, repeat=True)

    async with make_client() as client:
        await asyncio.gather(*(client.orders.get(7001) for _ in range(5)))
        session = client._sessions.get()
        assert not session.closed

    assert session.closed
    assert calls(mock, "GET", "/orders/7001") == 5


async def test_no_session_is_made_before_the_first_request() -> None:
    client = make_client()
    await client.close()  # nothing to close, no error
    assert client._sessions._session is None


async def test_a_closed_client_says_so(mock: aioresponses) -> None:
    client = make_client()
    await client.close()

    with pytest.raises(RuntimeError, match="closed"):
        await client.orders.get(7001)


async def test_with_options_shares_session_and_limiter(mock: aioresponses) -> None:
    mock.get(ORDER_7001, payload={"order": order()}, repeat=True)

    async with make_client(timeout=30, max_retries=2) as client:
        patient = client.with_options(timeout=120, max_retries=5)
        await client.orders.get(7001)
        await patient.orders.get(7001)

        assert (patient.timeout, patient.max_retries) == (120.0, 5)
        assert (client.timeout, client.max_retries) == (30.0, 2)
        assert patient.order_limiter is client.order_limiter
        assert patient._sessions.get() is client._sessions.get()
        mock.get(f"{BASE_URL}/orders/7002", callback=_no_answer)
        with pytest.raises(APITimeoutError, match=r"within 0\.05 s"):
            await client.with_options(timeout=0.05, max_retries=0).orders.get(7002)

        await patient.close()  # a copy borrows the session
        assert not client._sessions.get().closed


async def test_a_copys_orders_go_through_the_shared_limiter(mock: aioresponses) -> None:
    limiter = FakeLimiter()
    mock.post(BASE_URL + "/orders", status=201, payload={"order": order()})

    async with make_client(order_limiter=limiter) as client:
        await client.with_options(max_retries=0).orders.create(order_request())

    assert limiter.calls[0] == ("acquire", False)


async def test_two_clients_can_share_one_limiter(mock: aioresponses) -> None:
    clock = ManualClock(auto_advance=True)
    limiter = RollingWindowLimiter(1, 60.0, margin=0.0, clock=clock)
    moments: list[float] = []
    mock.post(BASE_URL + "/orders", status=201, payload={"order": order()}, repeat=True)

    async def create(client: AsyncShippingClient) -> None:
        await client.orders.create(order_request())
        moments.append(clock.monotonic())

    async with (
        make_client(clock=clock, order_limiter=limiter) as one,
        make_client(clock=clock, order_limiter=limiter) as two,
    ):
        await asyncio.gather(create(one), create(two))

    assert sorted(moments) == [0.0, 60.0]


async def test_an_answer_a_client_middleware_already_read_is_still_decoded() -> None:
    async def logging_middleware(
        request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        response = await handler(request)
        await response.read()  # as a logging middleware does
        return response

    async with (
        SandboxServer(speed=100.0, seed=3) as sandbox,
        aiohttp.ClientSession(middlewares=(logging_middleware,)) as session,
    ):
        client = AsyncShippingClient(
            sandbox.token, base_url=sandbox.base_url, session=session, clock=sandbox.clock
        )
        created = await client.webhooks.create(
            "https://example.com/hook", ["shipment.updated.status"]
        )
        assert (await client.webhooks.get(created.id)).target_url == "https://example.com/hook"


async def test_the_clock_speed_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHIPPING_CLOCK_SPEED", "250")
    assert make_client(clock=None).clock.speed == 250  # type: ignore[attr-defined]
    monkeypatch.setenv("SHIPPING_CLOCK_SPEED", "fast")
    with pytest.raises(ConfigurationError, match="SHIPPING_CLOCK_SPEED"):
        make_client(clock=None)
