"""The clocks: scaled durations, virtual time, and stating server durations in clock time."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest

from shipping_async.clock import Clock, ManualClock, ScaledClock, SystemClock


@pytest.mark.parametrize(
    "clock",
    [
        pytest.param(SystemClock(), id="system"),
        pytest.param(ScaledClock(speed=50), id="scaled"),
        pytest.param(ManualClock(), id="manual"),
    ],
)
def test_every_clock_implements_the_protocol(clock: Clock) -> None:
    assert isinstance(clock, Clock)
    assert clock.now().tzinfo is not None


async def test_a_scaled_clock_sleeps_its_time_divided_by_speed() -> None:
    clock = ScaledClock(speed=100)
    started_real, started = time.monotonic(), clock.monotonic()

    await clock.sleep(10.0)  # 0.1 s of real time

    real_elapsed = time.monotonic() - started_real
    assert 0.09 <= real_elapsed < 1.0
    assert clock.monotonic() - started >= 9.0


def test_a_scaled_clock_converts_between_real_and_protocol_seconds() -> None:
    clock = ScaledClock(speed=100)
    assert clock.from_real(0.6) == pytest.approx(60.0)
    assert clock.to_real(60.0) == pytest.approx(0.6)
    assert SystemClock().from_real(0.6) == 0.6


def test_a_scaled_clock_refuses_a_speed_that_is_not_positive() -> None:
    with pytest.raises(ValueError, match="speed"):
        ScaledClock(speed=0)


async def test_a_manual_clock_wakes_sleepers_only_when_advanced() -> None:
    clock = ManualClock(wall_origin=datetime(2026, 1, 5, 9, 0, tzinfo=UTC))
    sleeper = asyncio.create_task(clock.sleep(30.0))
    await asyncio.sleep(0)

    clock.advance(29.0)
    await asyncio.sleep(0)
    assert not sleeper.done()

    clock.advance(1.0)
    await asyncio.wait_for(sleeper, timeout=1.0)
    assert clock.monotonic() == 30.0
    assert clock.now() == datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC)


async def test_a_manual_clock_with_auto_advance_jumps_to_the_next_deadline() -> None:
    clock = ManualClock(auto_advance=True)
    order: list[float] = []

    async def nap(seconds: float) -> None:
        await clock.sleep(seconds)
        order.append(clock.monotonic())

    await asyncio.wait_for(asyncio.gather(nap(60.0), nap(20.0), nap(40.0)), timeout=1.0)

    assert order == [20.0, 40.0, 60.0]


def test_a_manual_clock_cannot_go_backwards() -> None:
    with pytest.raises(ValueError, match="backwards"):
        ManualClock().advance(-1.0)


def test_a_manual_clock_wall_time_follows_its_monotonic_time() -> None:
    clock = ManualClock(start=10.0)
    before = clock.now()
    clock.advance(5.0)
    assert clock.now() - before == timedelta(seconds=5)
