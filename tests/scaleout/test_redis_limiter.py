"""The Redis order limiter: the Lua scripts' permit rules, shared between limiter instances.

Two ``RedisOrderLimiter`` objects on one account stand for two worker processes: they
share nothing but Redis. Windows are a few tenths of a real second (the scripts read
Redis ``TIME``, which is real).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio as aioredis

from shipping_async.clock import ManualClock, ScaledClock
from shipping_async.limiter import OrderLimiter, Permit
from shipping_async.scaleout import redis_limiter
from shipping_async.scaleout.redis_limiter import LimiterUnavailableError, RedisOrderLimiter

from .conftest import REDIS_URL, PrivateRedis, free_port

WINDOW = 0.3
MARGIN = 0.03
HOLD = WINDOW + MARGIN

MakeLimiter = Callable[..., RedisOrderLimiter]


@pytest.fixture
async def make_limiter(prefix: str, redis_client: aioredis.Redis) -> AsyncIterator[MakeLimiter]:
    """Build limiters on the shared Redis under this test's prefix; close them afterwards."""
    made: list[RedisOrderLimiter] = []

    def make(account: str = "acct", **options: object) -> RedisOrderLimiter:
        settings: dict[str, object] = {
            "limit": 3,
            "window": WINDOW,
            "margin": MARGIN,
            "lease": 5.0,
            "prefix": prefix,
        }
        settings.update(options)
        limiter = RedisOrderLimiter(redis_client, account=account, **settings)  # type: ignore[arg-type]
        made.append(limiter)
        return limiter

    yield make
    for limiter in made:
        await limiter.aclose()


async def test_implements_the_order_limiter_protocol(make_limiter: MakeLimiter) -> None:
    assert isinstance(make_limiter(), OrderLimiter)


async def test_keys_of_one_account_share_a_cluster_hash_tag(make_limiter: MakeLimiter) -> None:
    limiter = make_limiter("acme")
    assert all("{acme}" in key for key in limiter.keys)


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"account": "a{b}"}, id="braces-in-account"),
        pytest.param({"account": "a", "limit": 0}, id="zero-limit"),
        pytest.param({"account": "a", "window": 0}, id="zero-window"),
        pytest.param({"account": "a", "clock": ManualClock()}, id="manual-clock"),
    ],
)
async def test_bad_options_are_refused(options: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"account|limit|window|clock"):
        RedisOrderLimiter(REDIS_URL, **options)  # type: ignore[arg-type]


async def test_limit_permits_are_shared_by_every_process_of_the_account(
    make_limiter: MakeLimiter,
) -> None:
    first, second = make_limiter(), make_limiter()
    permits = [await first.acquire(), await second.acquire(), await first.acquire()]
    assert await first.in_use() == 3
    fourth = asyncio.create_task(second.acquire())
    await asyncio.sleep(0.1)
    assert not fourth.done()
    await first.release(permits[0], sent=False)
    assert isinstance(await asyncio.wait_for(fourth, 1.0), Permit)


async def test_sent_permit_stays_counted_window_plus_margin_after_release(
    make_limiter: MakeLimiter,
) -> None:
    first, second = make_limiter(limit=1), make_limiter(limit=1)
    permit = await first.acquire()
    await asyncio.sleep(0.1)  # the request's round trip
    await first.release(permit, sent=True)
    released = time.monotonic()
    await second.acquire()
    waited = time.monotonic() - released
    assert HOLD - 0.01 <= waited <= HOLD + 0.1


async def test_unreleased_permit_of_a_dead_worker_frees_after_its_lease(
    make_limiter: MakeLimiter,
) -> None:
    dead, alive = make_limiter(limit=1, lease=0.2), make_limiter(limit=1, lease=0.2)
    await dead.acquire()  # ... and the worker dies without releasing
    started = time.monotonic()
    await alive.acquire()
    waited = time.monotonic() - started
    assert 0.2 + HOLD - 0.02 <= waited <= 0.2 + HOLD + 0.15


async def test_pause_after_a_429_holds_every_process(make_limiter: MakeLimiter) -> None:
    refused, other = make_limiter(limit=5), make_limiter(limit=5)
    await refused.pause(0.25)
    started = time.monotonic()
    await other.acquire()
    waited = time.monotonic() - started
    assert 0.25 + MARGIN - 0.01 <= waited <= 0.25 + MARGIN + 0.1


async def test_stricter_rate_from_a_429_is_adopted_by_every_process(
    make_limiter: MakeLimiter,
) -> None:
    refused, other = make_limiter(limit=5), make_limiter(limit=5)
    await refused.pause(0, limit=2, window=WINDOW * 2)
    assert (refused.limit, refused.window) == (2, pytest.approx(WINDOW * 2))
    await asyncio.sleep(MARGIN * 2 + 0.01)  # the pause: 0 s + the new margin
    await other.acquire()
    assert (other.limit, other.window) == (2, pytest.approx(WINDOW * 2))
    await other.acquire()
    third = asyncio.create_task(other.acquire())
    await asyncio.sleep(0.1)
    assert not third.done()
    third.cancel()


async def test_laxer_rate_from_a_429_changes_nothing(make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(limit=3)
    await limiter.pause(0, limit=10, window=WINDOW / 2)
    assert (limiter.limit, limiter.window) == (3, pytest.approx(WINDOW))


async def test_waiters_of_one_process_are_served_in_order_and_front_first(
    make_limiter: MakeLimiter,
) -> None:
    limiter = make_limiter(limit=1)
    first = await limiter.acquire()
    order: list[str] = []

    async def take(name: str, *, front: bool = False) -> None:
        permit = await limiter.acquire(front=front)
        order.append(name)
        await limiter.release(permit, sent=False)

    tasks = [asyncio.create_task(take(name)) for name in ("a", "b", "c")]
    await asyncio.sleep(0.02)
    tasks.append(asyncio.create_task(take("resend", front=True)))
    await asyncio.sleep(0.02)
    await limiter.release(first, sent=False)
    await asyncio.wait_for(asyncio.gather(*tasks), 2.0)
    assert order == ["resend", "a", "b", "c"]


async def test_cancelled_acquire_takes_no_permit(make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(limit=1)
    held = await limiter.acquire()
    waiting = asyncio.create_task(limiter.acquire())
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await limiter.release(held, sent=False)
    assert await limiter.in_use() == 0


async def test_releasing_twice_is_refused(make_limiter: MakeLimiter) -> None:
    limiter = make_limiter()
    permit = await limiter.acquire()
    await limiter.release(permit, sent=True)
    with pytest.raises(ValueError, match="released twice"):
        await limiter.release(permit, sent=True)


async def test_accounts_have_budgets_of_their_own(make_limiter: MakeLimiter) -> None:
    north, south = make_limiter("north", limit=2), make_limiter("south", limit=2)
    for _ in range(2):
        await north.acquire()
    started = time.monotonic()
    for _ in range(2):
        await south.acquire()
    assert time.monotonic() - started < 0.05


async def test_only_the_head_of_a_process_polls_redis(make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(limit=5)
    calls = 0
    script = limiter._store._scripts["acquire"]

    async def counting(*args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        return await script(*args, **kwargs)  # type: ignore[arg-type]

    limiter._store._scripts["acquire"] = counting  # type: ignore[assignment]

    async def order() -> None:
        await limiter.release(await limiter.acquire(), sent=True)

    await asyncio.wait_for(asyncio.gather(*(order() for _ in range(30))), 5.0)
    # 30 waiters in batches of 5: about one call per batch, plus a wake-up or two while
    # the first of a batch are still in flight - never one per waiter per tick.
    assert calls <= 15


async def test_scaled_clock_turns_protocol_seconds_into_real_ones(
    make_limiter: MakeLimiter,
) -> None:
    limiter = make_limiter(limit=1, window=30.0, margin=3.0, clock=ScaledClock(speed=100))
    permit = await limiter.acquire()
    await limiter.release(permit, sent=True)
    started = time.monotonic()
    await limiter.acquire()
    assert 0.32 <= time.monotonic() - started <= 0.45  # (30 + 3) / 100 real seconds
    assert limiter.window == pytest.approx(30.0)


async def test_redis_that_lost_its_data_pauses_orders_for_one_window(
    make_limiter: MakeLimiter, redis_client: aioredis.Redis
) -> None:
    limiter = make_limiter(limit=3)
    for _ in range(3):
        await limiter.release(await limiter.acquire(), sent=True)
    await redis_client.delete(*limiter.keys)  # a restart without persistence
    fresh = make_limiter(limit=3)
    started = time.monotonic()
    await limiter.acquire()
    waited = time.monotonic() - started
    assert HOLD - 0.02 <= waited <= HOLD + 0.1
    assert fresh.limit == 3  # a newcomer knows no earlier copy, but honours the pause


async def test_unreachable_redis_fails_closed_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nobody listens there
    async with RedisOrderLimiter(url, account="acct", max_outage=0.3) as limiter:
        with caplog.at_level(logging.ERROR), pytest.raises(LimiterUnavailableError) as caught:
            await asyncio.wait_for(limiter.acquire(), 5.0)
    assert "no order was sent" in str(caught.value)
    assert "Redis unreachable" in caplog.text


async def test_orders_wait_while_redis_is_down_and_go_on_when_it_returns(
    private_redis: PrivateRedis, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    await private_redis.wait_ready()
    async with RedisOrderLimiter(
        private_redis.url, account="acct", limit=5, window=WINDOW, margin=MARGIN, prefix=prefix
    ) as limiter:
        await limiter.release(await limiter.acquire(), sent=True)
        private_redis.stop()
        with caplog.at_level(logging.ERROR):
            waiting = asyncio.create_task(limiter.acquire())
            await asyncio.sleep(0.3)
        assert not waiting.done()
        assert "no order is sent until it answers again" in caplog.text
        private_redis.start()
        restarted = time.monotonic()
        permit = await asyncio.wait_for(waiting, 5.0)
        # The restarted Redis is empty: the limiter holds orders one window after it.
        assert time.monotonic() - restarted >= HOLD - 0.05
        await limiter.release(permit, sent=True)


# Permits fetched ahead go back after 1 % of a window without an ask, 5 % at most: the
# reserve tests use 2 s windows (20 ms, 100 ms) so that a 5 ms round trip fits.
RESERVE_WINDOW = 2.0


async def test_asking_for_the_next_free_permit_fetches_one_ahead(make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(limit=2, window=RESERVE_WINDOW)
    other = make_limiter(limit=2, window=RESERVE_WINDOW)
    assert limiter.available() == 0
    assert limiter.next_free_at() is not None
    await asyncio.sleep(0.005)  # one round trip
    assert limiter.available() == 1
    assert await other.in_use() == 1  # a permit in reserve counts for everyone
    permit = await asyncio.wait_for(limiter.acquire(), 0.01)
    assert limiter.available() == 0
    await limiter.release(permit, sent=False)
    assert await other.in_use() == 0


async def test_closing_gives_back_the_permits_fetched_ahead(make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(limit=2, window=RESERVE_WINDOW)
    other = make_limiter(limit=2, window=RESERVE_WINDOW)
    limiter.next_free_at()
    await asyncio.sleep(0.005)
    assert await other.in_use() == 1
    await limiter.aclose()
    assert await other.in_use() == 0


async def test_repeated_asks_fetch_twice_as_many_each_time_up_to_the_limit(
    make_limiter: MakeLimiter,
) -> None:
    limiter = make_limiter(limit=5, window=RESERVE_WINDOW)
    seen = []
    for _ in range(4):
        limiter.next_free_at()  # a gate still waiting with every ready permit spoken for
        await asyncio.sleep(0.005)
        seen.append(limiter.available())
    assert seen == [1, 2, 4, 5]


async def test_permits_fetched_ahead_go_back_once_nobody_asks(make_limiter: MakeLimiter) -> None:
    limiter = make_limiter(limit=2, window=RESERVE_WINDOW)
    other = make_limiter(limit=2, window=RESERVE_WINDOW)
    limiter.next_free_at()
    await asyncio.sleep(0.005)
    assert await other.in_use() == 1
    await asyncio.sleep(RESERVE_WINDOW * 0.01 + 0.02)  # quiet: 1 % of the window
    assert limiter.available() == 0
    assert await other.in_use() == 0


async def test_promised_permits_stay_in_the_reserve(make_limiter: MakeLimiter) -> None:
    class Gate:
        reserved = 1  # a job let through, about to acquire
        pokes = 0

        def poke(self) -> None:
            self.pokes += 1

    limiter = make_limiter(limit=2, window=RESERVE_WINDOW)
    gate = Gate()
    limiter.attach_gate(gate)
    limiter.next_free_at()
    await asyncio.sleep(RESERVE_WINDOW * 0.05 + 0.05)  # longer than any expiry
    assert limiter.available() == 1
    assert gate.pokes == 1  # woken when the permit was ready


async def test_permits_in_the_reserve_of_a_dead_worker_free_after_the_short_reserve_lease(
    make_limiter: MakeLimiter, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Short windows for a short hold, long reserve times to have time to kill the pump.
    monkeypatch.setattr(redis_limiter, "_RESERVE_IDLE_SHARE", 0.5)
    monkeypatch.setattr(redis_limiter, "_RESERVE_QUIET_SHARE", 0.2)
    dead, alive = make_limiter(limit=1), make_limiter(limit=1)
    dead.next_free_at()
    await asyncio.sleep(0.005)
    assert dead.available() == 1
    assert dead._pump is not None
    dead._pump.cancel()  # the process dies: nobody gives its reserve back
    started = time.monotonic()
    await alive.acquire()
    # Counted for 1.5 times the reserve's idle time (0.15 s here), not the 5 s lease.
    assert time.monotonic() - started <= 1.5 * WINDOW * 0.5 + HOLD + 0.1


async def test_a_permit_fetched_ahead_is_not_used_during_a_pause(
    make_limiter: MakeLimiter,
) -> None:
    ahead = make_limiter(limit=2, window=RESERVE_WINDOW)
    refused = make_limiter(limit=2, window=RESERVE_WINDOW)
    ahead.next_free_at()
    await asyncio.sleep(0.005)
    assert ahead.available() == 1
    await refused.pause(0.2)
    started = time.monotonic()
    await ahead.acquire()
    assert time.monotonic() - started >= 0.2
