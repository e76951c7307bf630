"""orders.create inside a web app: bounded waits, cancellation, and the order ledger."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aioresponses import aioresponses

from shipping_async import CancelledOrder
from shipping_async.clock import ManualClock, SystemClock
from shipping_async.errors import (
    BadRequestError,
    OrderOutcomeUnknownError,
    OrderWaitTimeoutError,
    RequestValidationError,
)
from shipping_async.ledger import OrderLedger, SQLiteOrderLedger
from shipping_async.limiter import RollingWindowLimiter
from tests.ledgers import KINDS, open_ledger

from .support import BASE_URL, calls, make_client, order, order_request, reply

ORDERS = BASE_URL + "/orders"
TOO_MANY = {"success": False, "error": "20 of 20 in 60 seconds", "errors": []}


async def _spent(limiter: RollingWindowLimiter) -> None:
    """Use the limiter's only permit up: the next frees one window (+ margin) later."""
    await limiter.release(await limiter.acquire(), sent=True)


# -- item 1: bounded waits ---------------------------------------------------------------


async def test_max_wait_raises_a_timeout_that_says_nothing_was_sent_within_50_ms(
    mock: aioresponses,
) -> None:
    clock = SystemClock()
    limiter = RollingWindowLimiter(1, 60.0, clock=clock)
    await _spent(limiter)

    async with make_client(clock=clock, order_limiter=limiter) as client:
        started = time.monotonic()
        with pytest.raises(OrderWaitTimeoutError) as caught:
            await client.orders.create(order_request(), max_wait=0.3)
        late = time.monotonic() - started - 0.3

    assert 0 <= late < 0.05
    error = caught.value
    assert isinstance(error, TimeoutError)
    assert error.sent is False
    assert "no request was sent" in str(error)
    assert error.expected_wait == pytest.approx(60 * 1.02 - 0.3, abs=0.1)
    assert calls(mock, "POST", "/orders") == 0
    assert limiter.available() == 0
    assert limiter.queued() == 0


async def test_the_client_default_max_wait_applies_on_its_clock(mock: aioresponses) -> None:
    clock = ManualClock(auto_advance=True)
    limiter = RollingWindowLimiter(1, 60.0, clock=clock)
    await _spent(limiter)

    async with make_client(clock=clock, order_limiter=limiter, max_wait=5) as client:
        with pytest.raises(OrderWaitTimeoutError):
            await client.orders.create(order_request())

    assert clock.monotonic() == pytest.approx(5.0)
    assert calls(mock, "POST", "/orders") == 0


async def test_a_handler_reads_the_expected_wait_and_the_queue_before_waiting(
    mock: aioresponses,
) -> None:
    clock = ManualClock()
    limiter = RollingWindowLimiter(1, 60.0, clock=clock)
    async with make_client(clock=clock, order_limiter=limiter) as client:
        assert client.orders.expected_wait() == 0.0
        await _spent(limiter)
        clock.advance(10)
        assert client.orders.expected_wait() == pytest.approx(50 + 1.2)

        queued = asyncio.create_task(limiter.acquire())
        await asyncio.sleep(0)
        assert client.order_limiter.queued() == 1
        assert client.order_limiter.next_free_at() == pytest.approx(61.2)
        # One permit per window: the newcomer waits one more window behind the queue.
        assert client.orders.expected_wait() == pytest.approx(51.2 + 61.2)
        queued.cancel()


async def test_max_wait_after_a_429_says_the_order_was_refused_not_created(
    mock: aioresponses,
) -> None:
    clock = ManualClock(auto_advance=True)
    mock.post(ORDERS, status=429, payload=TOO_MANY)

    async with make_client(clock=clock, order_limiter=RollingWindowLimiter(clock=clock)) as c:
        with pytest.raises(OrderWaitTimeoutError) as caught:
            await c.orders.create(order_request(), max_wait=10)

    assert caught.value.sent is True
    assert "refused with 429" in str(caught.value)
    assert calls(mock, "POST", "/orders") == 1


# -- item 2: cancellation ------------------------------------------------------------------


async def test_cancelled_while_queued_nothing_is_sent_and_it_says_so(mock: aioresponses) -> None:
    clock = ManualClock()
    limiter = RollingWindowLimiter(1, 60.0, clock=clock)
    await _spent(limiter)
    reports: list[CancelledOrder] = []

    async with make_client(
        clock=clock, order_limiter=limiter, on_cancelled_order=reports.append
    ) as c:
        task = asyncio.create_task(c.orders.create(order_request()))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    assert [(r.customer_reference, r.outcome, r.order_id) for r in reports] == [
        ("PO-2026-0001", "not_sent", None)
    ]
    assert calls(mock, "POST", "/orders") == 0
    assert limiter.queued() == 0


@pytest.mark.parametrize(
    ("answer", "outcome", "order_id"),
    [
        pytest.param(reply(201, {"order": order()}), "created", 7001, id="created"),
        pytest.param(reply(429, TOO_MANY), "not_created", None, id="429"),
        pytest.param(reply(502, {"error": "bad gateway"}), "unknown", None, id="502"),
    ],
)
async def test_cancelled_on_the_wire_the_answer_is_read_then_recorded(
    mock: aioresponses, tmp_path: Path, answer: Any, outcome: str, order_id: int | None
) -> None:
    on_the_wire, release = asyncio.Event(), asyncio.Event()

    async def slow(url: Any, **kwargs: Any) -> Any:
        on_the_wire.set()
        await release.wait()
        return answer

    mock.post(ORDERS, callback=slow)
    reports: list[CancelledOrder] = []
    async with await SQLiteOrderLedger.open(tmp_path / "orders.ledger") as ledger:
        async with make_client(order_ledger=ledger, on_cancelled_order=reports.append) as c:
            task = asyncio.create_task(c.orders.create(order_request()))
            await on_the_wire.wait()
            task.cancel()
            await asyncio.sleep(0.01)
            assert not task.done()
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await task
        entry = await ledger.get("PO-2026-0001")

    assert [(r.outcome, r.order_id) for r in reports] == [(outcome, order_id)]
    if outcome == "created":
        assert entry is not None
        assert (entry.state, entry.order_id) == ("ordered", 7001)
    elif outcome == "unknown":
        assert entry is not None
        assert entry.state == "unknown"
    else:
        assert entry is None  # refused: the reference is free again


async def test_a_cancelled_create_on_the_wire_is_logged_naming_the_order(
    mock: aioresponses, caplog: pytest.LogCaptureFixture
) -> None:
    on_the_wire = asyncio.Event()

    async def slow(url: Any, **kwargs: Any) -> Any:
        on_the_wire.set()
        await asyncio.sleep(0.02)
        return reply(201, {"order": order()})

    mock.post(ORDERS, callback=slow)
    async with make_client() as client:
        task = asyncio.create_task(client.orders.create(order_request()))
        await on_the_wire.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    assert "order 7001 was created" in caplog.text
    assert "PO-2026-0001" in caplog.text


# -- item 3: the order ledger --------------------------------------------------------------


@pytest.fixture(params=KINDS)
async def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[OrderLedger]:
    async with open_ledger(request.param, tmp_path) as opened:
        yield opened


async def test_a_second_create_with_an_ordered_reference_returns_that_order_unsent(
    mock: aioresponses, ledger: OrderLedger
) -> None:
    mock.post(ORDERS, status=201, payload={"order": order()})
    async with make_client(order_ledger=ledger) as client:
        first = await client.orders.create(order_request())
        again = await client.orders.create(order_request())

    assert again == first
    assert calls(mock, "POST", "/orders") == 1


async def test_concurrent_creates_of_one_reference_send_once(
    mock: aioresponses, ledger: OrderLedger
) -> None:
    mock.post(ORDERS, status=201, payload={"order": order()}, repeat=True)
    async with make_client(order_ledger=ledger) as client:
        results = await asyncio.gather(
            *(client.orders.create(order_request()) for _ in range(10)), return_exceptions=True
        )

    assert calls(mock, "POST", "/orders") == 1
    created = [r for r in results if not isinstance(r, BaseException)]
    assert created
    assert all(r.id == 7001 for r in created)
    assert all(isinstance(r, OrderOutcomeUnknownError) for r in results if r not in created)


async def test_a_lost_answer_blocks_resending_until_resolved_in_one_call(
    mock: aioresponses, ledger: OrderLedger
) -> None:
    mock.post(ORDERS, exception=aiohttp.ServerDisconnectedError())
    mock.get(ORDERS + "/7001", payload={"order": order()})
    async with make_client(order_ledger=ledger) as client:
        with pytest.raises(OrderOutcomeUnknownError):
            await client.orders.create(order_request())
        with pytest.raises(OrderOutcomeUnknownError) as caught:
            await client.orders.create(order_request())
        assert "orders.resolve" in str(caught.value)
        assert [e.customer_reference for e in await ledger.unresolved()] == ["PO-2026-0001"]

        await client.orders.resolve("PO-2026-0001", order_id=7001)
        again = await client.orders.create(order_request())

    assert again.id == 7001
    assert calls(mock, "POST", "/orders") == 1
    assert await ledger.unresolved() == []


async def test_resolving_as_not_created_lets_the_next_create_send(
    mock: aioresponses, ledger: OrderLedger
) -> None:
    mock.post(ORDERS, exception=aiohttp.ServerDisconnectedError())
    mock.post(ORDERS, status=201, payload={"order": order(id=7002)})
    async with make_client(order_ledger=ledger) as client:
        with pytest.raises(OrderOutcomeUnknownError):
            await client.orders.create(order_request())
        await client.orders.resolve("PO-2026-0001", order_id=None)
        created = await client.orders.create(order_request())

    assert created.id == 7002
    assert calls(mock, "POST", "/orders") == 2


async def test_resolve_refuses_an_order_of_another_reference(
    mock: aioresponses, ledger: OrderLedger
) -> None:
    mock.get(ORDERS + "/7001", payload={"order": order(customer_reference="OTHER")})
    async with make_client(order_ledger=ledger) as client:
        with pytest.raises(RequestValidationError, match="OTHER"):
            await client.orders.resolve("PO-2026-0001", order_id=7001)

    assert await ledger.get("PO-2026-0001") is None


async def test_a_refused_create_frees_the_reference(
    mock: aioresponses, ledger: OrderLedger
) -> None:
    mock.post(ORDERS, status=400, payload={"success": False, "error": "Invalid input"})
    mock.post(ORDERS, status=201, payload={"order": order()})
    async with make_client(order_ledger=ledger) as client:
        with pytest.raises(BadRequestError):
            await client.orders.create(order_request())
        assert (await client.orders.create(order_request())).id == 7001


async def test_a_wait_timeout_frees_the_reference(mock: aioresponses, tmp_path: Path) -> None:
    clock = ManualClock(auto_advance=True)
    limiter = RollingWindowLimiter(1, 60.0, clock=clock)
    await _spent(limiter)
    async with await SQLiteOrderLedger.open(tmp_path / "l") as ledger:
        async with make_client(clock=clock, order_limiter=limiter, order_ledger=ledger) as c:
            with pytest.raises(OrderWaitTimeoutError):
                await c.orders.create(order_request(), max_wait=1)
        assert await ledger.get("PO-2026-0001") is None


async def test_max_wait_zero_still_takes_a_free_permit(mock: aioresponses) -> None:
    mock.post(ORDERS, status=201, payload={"order": order()})
    clock = ManualClock()
    async with make_client(clock=clock, order_limiter=RollingWindowLimiter(clock=clock)) as c:
        assert (await c.orders.create(order_request(), max_wait=0)).id == 7001


async def test_a_create_cancelled_while_claiming_gives_its_claim_back(
    mock: aioresponses, tmp_path: Path
) -> None:
    busy = threading.Event()
    async with await SQLiteOrderLedger.open(tmp_path / "orders.ledger") as ledger:
        # The ledger's one thread is busy: the claim's transaction queues behind it and
        # runs (shielded) after its caller was cancelled.
        blocker = asyncio.get_running_loop().run_in_executor(ledger._executor, busy.wait)
        async with make_client(order_ledger=ledger) as client:
            task = asyncio.create_task(client.orders.create(order_request()))
            await asyncio.sleep(0.01)
            task.cancel()
            await asyncio.sleep(0.01)
            busy.set()
            with pytest.raises(asyncio.CancelledError):
                await task
        await blocker
        assert await ledger.get("PO-2026-0001") is None  # the reference is free again
    assert calls(mock, "POST", "/orders") == 0
