"""The attempts' time limits: one timer per due second, TimeoutError only for their own."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from shipping_async._bounded import Deadlines


def _expire_all(deadlines: Deadlines) -> None:
    """What the loop's timers do at each deadline, done now."""
    for when in list(deadlines._due):
        deadlines._expire(when)


async def test_a_short_limit_ends_its_block_with_a_timeout_error() -> None:
    deadlines = Deadlines(asyncio.get_running_loop())
    with pytest.raises(TimeoutError), deadlines.limit(0.01):
        await asyncio.Event().wait()
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0


async def test_limits_due_in_the_same_second_share_one_timer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = asyncio.get_running_loop()
    timers: list[float] = []
    call_at = loop.call_at

    def counted(when: float, callback: Any, *args: Any) -> asyncio.TimerHandle:
        timers.append(when)
        return call_at(when, callback, *args)

    monkeypatch.setattr(loop, "call_at", counted)
    deadlines = Deadlines(loop)
    for _ in range(200):
        with deadlines.limit(30.0):
            await asyncio.sleep(0)
    # At most a second boundary passed meanwhile; deadlines of 5 s or more are rounded up
    # to the whole second, as aiohttp rounds its own.
    assert 1 <= len(timers) <= 2
    assert all(when == int(when) and when >= loop.time() + 29 for when in timers)


async def test_a_block_that_ended_is_not_cancelled_at_its_deadline() -> None:
    deadlines = Deadlines(asyncio.get_running_loop())
    with deadlines.limit(30.0):
        pass
    _expire_all(deadlines)
    await asyncio.sleep(0)  # a cancellation, if any, would be delivered here
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0


async def test_a_cancellation_from_elsewhere_goes_on_past_an_expired_limit() -> None:
    deadlines = Deadlines(asyncio.get_running_loop())
    entered = asyncio.Event()

    async def attempt() -> None:
        with deadlines.limit(30.0):
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.ensure_future(attempt())
    await entered.wait()
    _expire_all(deadlines)
    task.cancel()  # the caller's own cancellation, in the same turn of the loop
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_an_expired_limit_inside_a_task_raises_timeout_error_there() -> None:
    deadlines = Deadlines(asyncio.get_running_loop())
    entered = asyncio.Event()

    async def attempt() -> str:
        try:
            with deadlines.limit(30.0):
                entered.set()
                await asyncio.Event().wait()
        except TimeoutError:
            return "timed out"
        return "answered"

    task = asyncio.ensure_future(attempt())
    await entered.wait()
    _expire_all(deadlines)
    assert await task == "timed out"
    assert task.cancelling() == 0
