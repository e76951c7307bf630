"""The order gate on a controlled clock: who wakes the job at the head of the queue."""

from __future__ import annotations

import asyncio

import pytest

from shipping_async.bulk._gate import GateClosedError, OrderGate
from shipping_async.bulk._places import Signal
from shipping_async.clock import ManualClock
from shipping_async.limiter import RollingWindowLimiter


def full_limiter(clock: ManualClock) -> RollingWindowLimiter:
    return RollingWindowLimiter(1, 60.0, clock=clock)


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def pending_sleeps(clock: ManualClock) -> int:
    """Sleeps on ``clock`` nobody has given up: a stray timer would move an
    auto-advancing clock on its own."""
    return sum(1 for _, _, future in clock._sleepers if not future.done())


@pytest.mark.parametrize("kind", [Signal, asyncio.Event], ids=["signal", "plain-event"])
async def test_a_job_waiting_at_the_gate_leaves_at_once_on_the_stop(
    kind: type[asyncio.Event],
) -> None:
    clock = ManualClock()
    limiter = full_limiter(clock)
    permit = await limiter.acquire()  # the one permit is on the wire
    stop = kind()
    gate = OrderGate(limiter, clock, stop)
    waiting = asyncio.create_task(gate.admit())
    await settle()
    assert not waiting.done()
    stop.set()
    with pytest.raises(GateClosedError):
        await asyncio.wait_for(waiting, 1)
    await limiter.release(permit, sent=False)


async def test_a_released_permit_lets_the_waiting_job_through_when_poked() -> None:
    clock = ManualClock()
    limiter = full_limiter(clock)
    permit = await limiter.acquire()
    gate = OrderGate(limiter, clock, Signal())
    waiting = asyncio.create_task(gate.admit())
    await settle()
    assert not waiting.done()
    await limiter.release(permit, sent=False)  # never sent: free again at once
    gate.poke()
    await asyncio.wait_for(waiting, 1)
    assert gate.reserved == 1


async def test_without_a_poke_the_waiting_job_looks_again_after_its_delay() -> None:
    clock = ManualClock()
    limiter = full_limiter(clock)
    permit = await limiter.acquire()
    gate = OrderGate(limiter, clock, Signal())
    waiting = asyncio.create_task(gate.admit())
    await settle()
    await limiter.release(permit, sent=False)  # released outside this gate: no poke
    await settle()
    assert not waiting.done()
    clock.advance(60.0 / 50)  # a fiftieth of the window while no permit's end is known
    await asyncio.wait_for(waiting, 1)
    await settle()
    assert pending_sleeps(clock) == 0


async def test_pokes_before_the_delay_reuse_one_timer_and_none_outlives_the_wait() -> None:
    clock = ManualClock()
    limiter = full_limiter(clock)
    permit = await limiter.acquire()
    gate = OrderGate(limiter, clock, Signal())
    waiting = asyncio.create_task(gate.admit())
    await settle()
    for _ in range(5):  # woken for nothing: it looks, and waits on the same timer
        gate.poke()
        await settle()
    assert pending_sleeps(clock) == 1
    await limiter.release(permit, sent=False)
    gate.poke()
    await asyncio.wait_for(waiting, 1)
    await settle()
    assert pending_sleeps(clock) == 0


async def test_while_the_store_is_away_nobody_passes_and_its_return_wakes_the_gate() -> None:
    clock = ManualClock()
    limiter = RollingWindowLimiter(5, 60.0, clock=clock)
    up = Signal()
    gate = OrderGate(limiter, clock, Signal(), up)
    waiting = asyncio.create_task(gate.admit())
    await settle()
    assert not waiting.done()  # permits are free, but no intent could be written
    up.set()
    await asyncio.wait_for(waiting, 1)


class _ReadyWhenAsked:
    """A limiter that has a permit ready as soon as it is asked when the next one is free,
    and pokes the gate at once (a shared limiter whose fetch answered within the tick)."""

    window = 60.0

    def __init__(self) -> None:
        self.ready = 0
        self.gate: OrderGate | None = None

    def available(self) -> int:
        return self.ready

    def next_free_at(self) -> float | None:
        self.ready = 1
        assert self.gate is not None
        self.gate.poke()
        return None


async def test_a_poke_made_while_the_gate_asks_the_limiter_is_not_lost() -> None:
    clock = ManualClock()  # never advances: only the poke can let the job through
    limiter = _ReadyWhenAsked()
    gate = OrderGate(limiter, clock, Signal())  # type: ignore[arg-type]
    limiter.gate = gate
    await asyncio.wait_for(gate.admit(), 1)
    assert gate.reserved == 1


class CountingLimiter(RollingWindowLimiter):
    """Counts how often the gate asks for free permits."""

    __slots__ = ("looks",)

    def __init__(self, limit: int, window: float, *, clock: ManualClock) -> None:
        super().__init__(limit, window, clock=clock)
        self.looks = 0

    def available(self) -> int:
        self.looks += 1
        return super().available()


@pytest.mark.parametrize("kind", [Signal, asyncio.Event], ids=["signal", "plain-event"])
async def test_a_poke_wakes_the_waiting_job_once_and_it_waits_again(
    kind: type[asyncio.Event],
) -> None:
    clock = ManualClock()
    limiter = CountingLimiter(1, 60.0, clock=clock)
    permit = await limiter.acquire()  # the one permit is on the wire: nobody may pass
    gate = OrderGate(limiter, clock, kind())
    waiting = asyncio.create_task(gate.admit())
    await settle()
    before = limiter.looks
    gate.poke()  # something changed: the job looks once and waits again
    await settle()
    assert not waiting.done()
    # A watcher of a plain Event, cancelled as its wait ended, used to poke the next wait:
    # the job then looked again at every turn of the loop.
    assert limiter.looks - before == 1
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await limiter.release(permit, sent=False)


async def test_jobs_pass_in_arrival_order_whether_or_not_they_had_to_wait() -> None:
    """A job that finds nobody in line and a permit free passes at once; one that comes
    while others wait takes its place behind them, even when a permit is free by then."""
    clock = ManualClock()
    limiter = RollingWindowLimiter(2, 60.0, clock=clock)
    gate = OrderGate(limiter, clock, Signal())
    await gate.admit()  # free permits, nobody in line: at once
    gate.sending()
    first = await limiter.acquire()
    second = await limiter.acquire()  # both permits on the wire: the next ones wait
    admitted: list[str] = []

    async def job(name: str) -> None:
        await gate.admit()
        admitted.append(name)
        gate.sending()
        await limiter.acquire()  # as the client does, right after

    waiting = [asyncio.create_task(job(name)) for name in ("a", "b")]
    await settle()
    assert admitted == []
    await limiter.release(first, sent=False)
    late = asyncio.create_task(job("late"))  # a permit is free now, but a and b wait
    gate.poke()
    await settle()
    assert admitted == ["a"]
    await limiter.release(second, sent=False)
    gate.poke()
    await settle()
    assert admitted == ["a", "b"]
    assert not late.done()  # both permits taken by a and b: late waits its turn
    await asyncio.gather(*waiting)
    late.cancel()
    await asyncio.gather(late, return_exceptions=True)
