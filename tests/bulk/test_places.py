"""The runner's places and stop signal: one future per waiter, served in order, left on stop."""

from __future__ import annotations

import asyncio

from shipping_async.bulk._places import Places, Signal


async def test_a_free_place_is_taken_at_once_even_once_stopped() -> None:
    stop = Signal()
    places = Places(1, stop)
    stop.set()
    assert await places.take(unless_stopped=True)
    assert places.locked()


async def test_a_place_given_back_goes_to_the_first_waiter_not_a_late_comer() -> None:
    places = Places(1)
    assert await places.take()
    served: list[str] = []

    async def wait(name: str) -> None:
        assert await places.take()
        served.append(name)

    first = asyncio.create_task(wait("first"))
    second = asyncio.create_task(wait("second"))
    await asyncio.sleep(0)
    places.give()
    assert places.locked()  # handed over: no late comer finds it free
    await first
    assert served == ["first"]
    places.give()
    await second
    assert served == ["first", "second"]


async def test_the_stop_sends_away_the_waiters_that_leave_on_it_and_only_them() -> None:
    stop = Signal()
    places = Places(0, stop)
    leaving = asyncio.create_task(places.take(unless_stopped=True))
    staying = asyncio.create_task(places.take())
    await asyncio.sleep(0)
    stop.set()
    assert await leaving is False
    assert not staying.done()
    places.give()
    assert await staying is True
    # Once stopped, a waiter that would leave on it does not wait at all.
    assert await places.take(unless_stopped=True) is False


async def test_a_waiter_cancelled_as_it_was_handed_a_place_passes_it_on() -> None:
    places = Places(0)
    first = asyncio.create_task(places.take())
    second = asyncio.create_task(places.take())
    await asyncio.sleep(0)
    places.give()  # handed to the first, which is cancelled before it runs
    first.cancel()
    assert await second is True
    assert places.locked()  # the one place, held by the second
    places.give()
    assert not places.locked()


async def test_a_cancelled_waiter_leaves_the_queue() -> None:
    places = Places(0)
    waiter = asyncio.create_task(places.take())
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    places.give()
    assert not places.locked()
    assert await places.take()


async def test_a_stop_signal_calls_each_listener_once_and_a_late_one_at_once() -> None:
    stop = Signal()
    heard: list[str] = []
    stop.listen(lambda: heard.append("early"))
    forgotten = lambda: heard.append("forgotten")  # noqa: E731
    stop.listen(forgotten)
    stop.unlisten(forgotten)
    stop.set()
    stop.set()
    assert heard == ["early"]
    stop.listen(lambda: heard.append("late"))
    assert heard == ["early", "late"]
    assert stop.is_set()
    await asyncio.wait_for(stop.wait(), timeout=1)  # still an asyncio.Event


async def test_take_now_takes_only_free_places_and_none_ahead_of_a_waiter() -> None:
    places = Places(3)
    assert places.take_now(2) == 2
    assert places.take_now(5) == 1
    assert places.take_now(1) == 0
    waiter = asyncio.create_task(places.take())
    await asyncio.sleep(0)
    places.give()  # to the waiter, not to a take_now
    assert places.take_now(1) == 0
    assert await waiter is True
