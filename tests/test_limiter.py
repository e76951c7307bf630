"""Tests of the order limiter: window arithmetic, queue order, pauses, cancellation."""

from __future__ import annotations

import asyncio
import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shipping_async.clock import ManualClock, SystemClock
from shipping_async.limiter import OrderLimiter, Permit, RemembersSent, RollingWindowLimiter

WINDOW = 60.0
MARGIN = 1.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(auto_advance=True)


def make_limiter(clock: ManualClock, limit: int = 3) -> RollingWindowLimiter:
    return RollingWindowLimiter(limit, WINDOW, margin=MARGIN, clock=clock)


async def settle(rounds: int = 5) -> None:
    """Let every runnable task reach its next await (no clock time passes)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class CountingClock(ManualClock):
    """A ManualClock that counts sleeps, to prove waiters do not poll."""

    sleeps = 0

    async def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        await super().sleep(seconds)


async def test_implements_the_order_limiter_protocol() -> None:
    assert isinstance(RollingWindowLimiter(), OrderLimiter)


async def test_defaults_are_the_api_rate() -> None:
    limiter = RollingWindowLimiter()
    assert (limiter.limit, limiter.window) == (20, 60.0)
    assert limiter.margin == pytest.approx(1.2)
    assert repr(limiter) == "RollingWindowLimiter(limit=20, window=60, margin=1.2)"


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        pytest.param((0, 60.0), {}, id="zero-limit"),
        pytest.param((2.5, 60.0), {}, id="fractional-limit"),
        pytest.param((20, 0.0), {}, id="zero-window"),
        pytest.param((20, math.inf), {}, id="infinite-window"),
        pytest.param((20, 60.0), {"margin": -1.0}, id="negative-margin"),
    ],
)
async def test_rejects_invalid_settings(
    args: tuple[float, float], kwargs: dict[str, float]
) -> None:
    with pytest.raises(ValueError, match=r"limit|window|margin"):
        RollingWindowLimiter(*args, **kwargs)  # type: ignore[arg-type]


async def test_first_limit_acquisitions_are_immediate(clock: ManualClock) -> None:
    limiter = make_limiter(clock)
    permits = [await limiter.acquire() for _ in range(3)]
    assert [p.acquired_at for p in permits] == [0.0, 0.0, 0.0]
    assert len({p.id for p in permits}) == 3
    assert limiter.available() == 0


async def test_orders_sent_before_a_restart_hold_permits_until_sent_plus_window(
    clock: ManualClock,
) -> None:
    clock.advance(1000)  # a limiter created long after its clock's origin
    limiter = make_limiter(clock)
    assert isinstance(limiter, RemembersSent)
    # A previous process sent three orders 10, 40 and 200 s ago (the last has cooled).
    limiter.remember_sent([10.0, 40.0, 200.0])

    assert limiter.available() == 1
    first = await limiter.acquire()
    assert first.acquired_at == 1000
    second = await limiter.acquire()  # waits for the one sent 40 s ago
    assert second.acquired_at == pytest.approx(1000 - 40 + WINDOW + MARGIN)
    third = await limiter.acquire()  # then the one sent 10 s ago
    assert third.acquired_at == pytest.approx(1000 - 10 + WINDOW + MARGIN)


async def test_remembered_orders_merge_with_the_limiters_own_in_time_order(
    clock: ManualClock,
) -> None:
    limiter = make_limiter(clock, limit=3)
    own = await limiter.acquire()
    clock.advance(30)
    await limiter.release(own, sent=True)  # cools at 30 + 61
    limiter.remember_sent([20.0, -5.0])  # sent at 10 (cools at 71) and one still to arrive

    assert limiter.available() == 0
    assert limiter.next_free_at() == pytest.approx(10 + WINDOW + MARGIN)
    assert (await limiter.acquire()).acquired_at == pytest.approx(10 + WINDOW + MARGIN)
    assert (await limiter.acquire()).acquired_at == pytest.approx(30 + WINDOW + MARGIN)


async def test_next_acquisition_waits_window_plus_margin_after_first_release(
    clock: ManualClock,
) -> None:
    limiter = make_limiter(clock)
    permits = [await limiter.acquire() for _ in range(3)]
    await clock.sleep(5)
    await limiter.release(permits[0], sent=True)
    await clock.sleep(2)
    await limiter.release(permits[1], sent=True)
    await limiter.release(permits[2], sent=True)

    fourth = await limiter.acquire()

    assert fourth.acquired_at == pytest.approx(5 + WINDOW + MARGIN)
    assert clock.monotonic() == pytest.approx(5 + WINDOW + MARGIN)


async def test_permit_held_in_flight_blocks_until_released(clock: ManualClock) -> None:
    limiter = make_limiter(clock, limit=1)
    permit = await limiter.acquire()
    waiter = asyncio.create_task(limiter.acquire())
    await clock.sleep(500)  # the request hangs: its permit stays taken however long
    assert not waiter.done()
    assert limiter.next_free_at() is None

    await limiter.release(permit, sent=True)

    assert (await waiter).acquired_at == pytest.approx(500 + WINDOW + MARGIN)


async def test_unsent_release_frees_the_permit_at_once(clock: ManualClock) -> None:
    limiter = make_limiter(clock, limit=1)
    permit = await limiter.acquire()
    waiter = asyncio.create_task(limiter.acquire())
    await settle()

    await limiter.release(permit, sent=False)

    assert (await waiter).acquired_at == 0.0


async def test_waiters_are_served_first_come_first_served(clock: ManualClock) -> None:
    limiter = make_limiter(clock, limit=1)
    first = await limiter.acquire()
    served: list[int] = []

    async def order(n: int) -> None:
        permit = await limiter.acquire()
        served.append(n)
        await limiter.release(permit, sent=True)

    tasks = [asyncio.create_task(order(n)) for n in range(5)]
    await settle()
    await limiter.release(first, sent=True)
    await asyncio.gather(*tasks)

    assert served == [0, 1, 2, 3, 4]
    assert clock.monotonic() == pytest.approx(5 * (WINDOW + MARGIN))


async def test_front_waiter_jumps_the_queue(clock: ManualClock) -> None:
    limiter = make_limiter(clock, limit=1)
    first = await limiter.acquire()
    served: list[str] = []

    async def order(name: str, *, front: bool = False) -> None:
        permit = await limiter.acquire(front=front)
        served.append(name)
        await limiter.release(permit, sent=False)

    queued = [asyncio.create_task(order(name)) for name in ("a", "b")]
    await settle()
    resend = asyncio.create_task(order("resend", front=True))
    await settle()
    await limiter.release(first, sent=False)
    await asyncio.gather(*queued, resend)

    assert served == ["resend", "a", "b"]


async def test_pause_blocks_every_acquirer_until_it_ends(clock: ManualClock) -> None:
    limiter = make_limiter(clock, limit=5)
    await limiter.pause(30)
    assert limiter.available() == 0
    assert limiter.next_free_at() == pytest.approx(30 + MARGIN)

    permits = await asyncio.gather(*(limiter.acquire() for _ in range(4)))

    assert [p.acquired_at for p in permits] == pytest.approx([30 + MARGIN] * 4)


async def test_shorter_pause_does_not_cut_a_longer_one(clock: ManualClock) -> None:
    limiter = make_limiter(clock)
    await limiter.pause(30)
    await limiter.pause(5)

    assert (await limiter.acquire()).acquired_at == pytest.approx(30 + MARGIN)


async def test_pause_adopts_a_stricter_limit_and_window(clock: ManualClock) -> None:
    limiter = make_limiter(clock, limit=20)
    await limiter.pause(0, limit=2, window=120)

    assert (limiter.limit, limiter.window) == (2, 120)
    assert repr(limiter) == "RollingWindowLimiter(limit=2, window=120, margin=1)"


@pytest.mark.parametrize(
    ("limit", "window", "adopted"),
    [
        pytest.param(50, 10.0, (20, WINDOW), id="both-looser"),
        pytest.param(50, 120.0, (20, 120.0), id="longer-window-looser-limit"),
        pytest.param(2, 10.0, (2, WINDOW), id="smaller-limit-shorter-window"),
    ],
)
async def test_pause_never_adopts_a_looser_limit_or_window(
    clock: ManualClock, limit: int, window: float, adopted: tuple[int, float]
) -> None:
    limiter = make_limiter(clock, limit=20)
    await limiter.pause(0, limit=limit, window=window)

    assert (limiter.limit, limiter.window) == adopted


async def test_stricter_limit_applies_to_the_queue(clock: ManualClock) -> None:
    limiter = make_limiter(clock, limit=3)
    await limiter.pause(0, limit=1)
    first = await limiter.acquire()
    second = asyncio.create_task(limiter.acquire())
    await settle()
    assert not second.done()

    await limiter.release(first, sent=True)

    assert first.acquired_at == pytest.approx(MARGIN)
    assert (await second).acquired_at == pytest.approx(MARGIN + WINDOW + MARGIN)


async def test_longer_window_also_covers_requests_already_released(clock: ManualClock) -> None:
    limiter = make_limiter(clock, limit=1)
    await limiter.release(await limiter.acquire(), sent=True)
    await limiter.pause(0, window=120)

    assert (await limiter.acquire()).acquired_at == pytest.approx(120 + MARGIN)


async def test_default_margin_follows_a_longer_window(clock: ManualClock) -> None:
    limiter = RollingWindowLimiter(20, 0.6, clock=clock)
    assert limiter.margin == pytest.approx(0.012)
    await limiter.pause(0, window=1.2)
    assert limiter.margin == pytest.approx(0.024)


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"seconds": -1.0}, id="negative-seconds"),
        pytest.param({"seconds": 1.0, "limit": 0}, id="zero-limit"),
        pytest.param({"seconds": 1.0, "window": -5.0}, id="negative-window"),
    ],
)
async def test_pause_rejects_invalid_values(clock: ManualClock, kwargs: dict[str, float]) -> None:
    limiter = make_limiter(clock)
    with pytest.raises(ValueError, match=r"seconds|limit|window"):
        await limiter.pause(**kwargs)  # type: ignore[arg-type]
    assert (limiter.limit, limiter.available()) == (3, 3)


async def test_cancelled_waiter_takes_no_permit_and_the_next_gets_it(clock: ManualClock) -> None:
    limiter = make_limiter(clock, limit=1)
    first = await limiter.acquire()
    cancelled = asyncio.create_task(limiter.acquire())
    await settle()
    second = asyncio.create_task(limiter.acquire())
    await settle()

    cancelled.cancel()
    await limiter.release(first, sent=False)

    assert (await second).acquired_at == 0.0
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert limiter.available() == 0  # only `second` holds one


async def test_permit_granted_as_its_waiter_is_cancelled_is_given_back(
    clock: ManualClock,
) -> None:
    limiter = make_limiter(clock, limit=1)
    first = await limiter.acquire()
    waiter = asyncio.create_task(limiter.acquire())
    await settle()

    await limiter.release(first, sent=False)  # hands the permit to `waiter`...
    waiter.cancel()  # ...which is cancelled before it could resume

    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert limiter.available() == 1


async def test_cancelling_every_waiter_stops_the_timer(clock: ManualClock) -> None:
    limiter = make_limiter(clock, limit=1)
    await limiter.release(await limiter.acquire(), sent=True)
    waiters = [asyncio.create_task(limiter.acquire()) for _ in range(3)]
    await settle()

    for waiter in waiters:
        waiter.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    await settle(50)  # auto-advance would have jumped to a sleeping timer's deadline by now

    assert clock.monotonic() == 0.0
    assert all(waiter.cancelled() for waiter in waiters)


async def test_waiters_sleep_on_the_clock_without_polling() -> None:
    clock = CountingClock(auto_advance=True)
    limiter = RollingWindowLimiter(2, WINDOW, margin=MARGIN, clock=clock)
    for permit in [await limiter.acquire() for _ in range(2)]:
        await limiter.release(permit, sent=True)

    async def order() -> float:
        permit = await limiter.acquire()
        await limiter.release(permit, sent=True)
        return permit.acquired_at

    acquired = await asyncio.gather(*(order() for _ in range(6)))

    # Three waves of two, one sleep of the single timer each: not one per waiter or tick.
    assert acquired == pytest.approx([61, 61, 122, 122, 183, 183])
    assert clock.sleeps == 3


async def test_releasing_a_permit_twice_is_refused(clock: ManualClock) -> None:
    limiter = make_limiter(clock)
    permit = await limiter.acquire()
    await limiter.release(permit, sent=True)

    with pytest.raises(ValueError, match="released twice"):
        await limiter.release(permit, sent=True)
    with pytest.raises(ValueError, match="another limiter"):
        await limiter.release(Permit(id="foreign", acquired_at=0.0), sent=False)


async def test_next_free_at_and_available_track_progress(clock: ManualClock) -> None:
    limiter = make_limiter(clock)
    assert (limiter.available(), limiter.next_free_at()) == (3, 0.0)
    permits = [await limiter.acquire() for _ in range(3)]
    for permit in permits:
        await limiter.release(permit, sent=True)
        await clock.sleep(10)

    assert (limiter.available(), limiter.next_free_at()) == (0, WINDOW + MARGIN)
    await clock.sleep(WINDOW + MARGIN - 30 + 15)  # the first two have cooled, not the third
    assert limiter.available() == 2


async def test_many_tasks_on_a_real_tiny_window_respect_the_limit() -> None:
    clock = SystemClock()
    limiter = RollingWindowLimiter(5, 0.2, clock=clock)
    start = clock.monotonic()
    times: list[float] = []

    async def order() -> None:
        permit = await limiter.acquire()
        times.append(clock.monotonic() - start)
        await limiter.release(permit, sent=True)

    async with asyncio.TaskGroup() as group:
        for _ in range(15):
            group.create_task(order())

    waves = [times[0:5], times[5:10], times[10:15]]
    hold = 0.2 + limiter.margin - 1e-3  # a loop timer may fire a clock tick early
    assert max(waves[0]) < 0.1
    assert min(waves[1]) >= hold
    assert min(waves[2]) - min(waves[1]) >= hold


# ---- properties ------------------------------------------------------------------------

request = st.tuples(
    st.floats(0, 200),  # when the task asks for a permit
    st.floats(0, 30),  # request latency: permit granted -> response
    st.floats(0, 1),  # where in that latency the request reaches the server
    st.booleans(),  # whether it is sent at all
    st.none() | st.floats(0, 100),  # cancel the task this long after it asks
    st.booleans(),  # front=True
)


@settings(max_examples=75, deadline=None)
@given(
    limit=st.integers(1, 5),
    window=st.floats(1, 60),
    margin=st.none() | st.floats(0.001, 2),
    requests=st.lists(request, max_size=40),
    offsets=st.lists(st.floats(0, 1), min_size=3, max_size=3),
)
async def test_no_window_ever_holds_more_than_limit_arrivals(
    limit: int,
    window: float,
    margin: float | None,
    requests: list[tuple[float, float, float, bool, float | None, bool]],
    offsets: list[float],
) -> None:
    clock = ManualClock(auto_advance=True)
    limiter = RollingWindowLimiter(limit, window, margin=margin, clock=clock)
    arrivals: list[float] = []
    completed = 0

    async def client(asks_at: float, latency: float, share: float, sent: bool, front: bool) -> None:
        nonlocal completed
        await clock.sleep(asks_at)
        permit = await limiter.acquire(front=front)
        reached = False
        try:
            await clock.sleep(latency * share)
            if sent:
                arrivals.append(clock.monotonic())
                reached = True
            await clock.sleep(latency * (1 - share))
            completed += 1
        finally:
            await limiter.release(permit, sent=reached)

    async def cancel_later(task: asyncio.Task[None], after: float) -> None:
        await clock.sleep(after)
        task.cancel()

    async with asyncio.TaskGroup() as group:
        for asks_at, latency, share, sent, cancel_after, front in requests:
            task = group.create_task(client(asks_at, latency, share, sent, front))
            if cancel_after is not None:
                group.create_task(cancel_later(task, asks_at + cancel_after))

    arrivals.sort()
    for first, last in zip(arrivals, arrivals[limit:], strict=False):
        assert last - first > window, "a sliding window held more than limit arrivals"
    for share in offsets:
        fixed = Counter(math.floor((a - share * window) / window) for a in arrivals)
        assert max(fixed.values(), default=0) <= limit, "a fixed window overflowed"
    assert completed >= sum(1 for *_, cancel_after, _ in requests if cancel_after is None)
    await clock.sleep(window + limiter.margin)
    assert limiter.available() == limit, "a permit leaked"


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 120), limit=st.integers(1, 20), window=st.floats(0.5, 60))
async def test_a_batch_takes_one_window_per_limit_orders(n: int, limit: int, window: float) -> None:
    clock = ManualClock(auto_advance=True)
    limiter = RollingWindowLimiter(limit, window, clock=clock)
    acquired: list[float] = []

    async def order() -> None:
        permit = await limiter.acquire()
        acquired.append(clock.monotonic())
        await limiter.release(permit, sent=True)

    async with asyncio.TaskGroup() as group:
        for _ in range(n):
            group.create_task(order())

    windows = math.ceil(n / limit) - 1
    bound = window * windows
    assert bound <= max(acquired) <= bound + limiter.margin * windows + 1e-9
    assert Counter(acquired).most_common(1)[0][1] <= limit
