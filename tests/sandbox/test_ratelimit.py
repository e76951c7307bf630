"""The POST /orders rate limit: 429 text in real seconds, sliding and fixed windows."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import aiohttp
import pytest

from shipping_async.clock import ManualClock
from shipping_async.sandbox import SandboxServer
from shipping_async.sandbox._ratelimit import RateLimiter

from .support import TOKEN, Api, order_body

ManualSandbox = Callable[..., AbstractAsyncContextManager[tuple[Api, ManualClock]]]


@pytest.fixture
def manual_sandbox() -> ManualSandbox:
    @asynccontextmanager
    async def start(**options: Any) -> AsyncIterator[tuple[Api, ManualClock]]:
        clock = ManualClock()
        async with (
            SandboxServer(token=TOKEN, clock=clock, **options) as server,
            aiohttp.ClientSession() as session,
        ):
            yield Api(session, server), clock

    return start


async def _post_orders(api: Api, count: int, estimate_id: int = 0) -> list[int]:
    # Invalid bodies are counted like any other request and are the cheapest to send.
    replies = await asyncio.gather(
        *(api.call("POST", "/orders", json=order_body(estimate_id)) for _ in range(count))
    )
    return [reply.status for reply in replies]


async def test_429_reports_the_window_in_real_seconds_at_speed_100(api: Api) -> None:
    # The fixture's sandbox runs at speed 100: the 60 s window lasts 0.6 real seconds.
    quote = await api.quote()
    statuses = await _post_orders(api, 20, quote["estimates"][0]["estimate_id"])
    reply = await api.call("POST", "/orders", json=order_body(0))
    assert statuses == [201] * 20
    assert reply.status == 429
    assert reply.body == {"success": False, "error": "20 of 20 in 0.6 seconds", "errors": []}


async def test_limit_and_window_are_configurable(manual_sandbox: ManualSandbox) -> None:
    async with manual_sandbox(rate_limit=3, rate_window=10) as (api, clock):
        statuses = await _post_orders(api, 3)
        refused = await api.call("POST", "/orders", json=order_body(0))
        clock.advance(10)
        after = await _post_orders(api, 1)
    assert statuses == [400] * 3
    # A manual clock runs at real speed: the window reads as configured.
    assert refused.body == {"success": False, "error": "3 of 3 in 10 seconds", "errors": []}
    assert after == [400]


async def test_sliding_window_frees_requests_one_window_after_each(
    manual_sandbox: ManualSandbox,
) -> None:
    async with manual_sandbox() as (api, clock):
        first = await _post_orders(api, 10)
        clock.advance(30)
        second = await _post_orders(api, 10)
        clock.advance(29)
        at_59 = await _post_orders(api, 1)
        clock.advance(1)
        at_60 = await _post_orders(api, 11)
        clock.advance(29.9)
        at_89 = await _post_orders(api, 1)
    assert 429 not in first + second
    assert at_59 == [429]
    assert sorted(at_60) == [400] * 10 + [429]  # only the first ten have left the window
    assert at_89 == [429]


async def test_fixed_window_resets_at_each_boundary(manual_sandbox: ManualSandbox) -> None:
    async with manual_sandbox(rate_mode="fixed") as (api, clock):
        first = await _post_orders(api, 10)
        clock.advance(30)
        second = await _post_orders(api, 10)
        clock.advance(29)
        at_59 = await _post_orders(api, 1)
        clock.advance(1)
        at_60 = await _post_orders(api, 21)
    assert 429 not in first + second
    assert at_59 == [429]
    assert sorted(at_60) == [400] * 20 + [429]  # a fresh window admits a full burst


async def test_refused_requests_do_not_count(manual_sandbox: ManualSandbox) -> None:
    async with manual_sandbox() as (api, clock):
        await _post_orders(api, 20)
        refused = []
        for _ in range(5):
            clock.advance(10)
            refused += await _post_orders(api, 3)
        clock.advance(10)  # t=60: the first twenty have left; the 429s never counted
        again = await _post_orders(api, 20)
    assert set(refused) == {429}
    assert again == [400] * 20


async def test_other_endpoints_are_not_limited(manual_sandbox: ManualSandbox) -> None:
    async with manual_sandbox(rate_limit=1) as (api, _):
        await _post_orders(api, 2)
        quotes = [await api.quote() for _ in range(3)]
    assert len(quotes) == 3


@pytest.mark.parametrize("mode", ["sliding", "fixed"])
def test_limiter_counts_per_key(mode: Any) -> None:
    clock = ManualClock()
    limiter = RateLimiter(clock, limit=2, window=60, mode=mode)
    assert [limiter.admit("a") for _ in range(3)] == [True, True, False]
    assert limiter.admit("b") is True
    limiter.reset()
    assert limiter.admit("a") is True
