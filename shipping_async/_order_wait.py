"""An order's two waits a web handler cares about: for a permit (bounded), and for its answer.

- :func:`acquire_within`: a permit before ``deadline`` (on the client's clock) or
  :class:`WaitExpired`. The bound cancels the limiter's ``acquire``, which takes no permit
  when cancelled, so nothing is held and nothing was sent.
- :func:`finish_abandoned`: once the request may be on the wire, a cancelled caller does
  not abandon its answer. The attempt runs in a task this module owns; the answer is read
  (aiohttp's total timeout bounds it), the permit released as the answer says, the outcome
  handed to ``settle``, and only then does the ``CancelledError`` go on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from shipping_async.clock import Clock
from shipping_async.errors import OrderWaitTimeoutError
from shipping_async.limiter import DEFAULT_MARGIN_SHARE, OrderLimiter, Permit

__all__ = [
    "Settle",
    "WaitExpired",
    "acquire_within",
    "expected_wait",
    "finish_abandoned",
    "finished",
    "run_to_the_end",
    "wait_timeout",
]

T = TypeVar("T")

#: Called with the attempt's result or error when its caller was cancelled meanwhile.
Settle = Callable[[object], Awaitable[None]]


class WaitExpired(Exception):
    """No permit before the deadline (turned into OrderWaitTimeoutError by the caller)."""


def wait_timeout(
    customer_reference: str | None,
    *,
    max_wait: float,
    limiter: OrderLimiter,
    clock: Clock,
    refused: int,
) -> OrderWaitTimeoutError:
    """The error of a create that got no permit within ``max_wait``: says nothing was made."""
    expected = expected_wait(limiter, clock)
    eta = f"; the limiter expects the next one in {expected:.3g} s" if expected is not None else ""
    which = f" for customer_reference {customer_reference!r}" if customer_reference else ""
    if refused:
        fate = (
            f"it was sent {refused} time(s) and refused with 429 each time, so no order was created"
        )
    else:
        fate = "no request was sent, so no order was created"
    return OrderWaitTimeoutError(
        f"no order permit within max_wait={max_wait:g} s{eta}: {fate}{which}. Retrying "
        "later is safe.",
        customer_reference=customer_reference,
        max_wait=max_wait,
        expected_wait=expected,
        sent=refused > 0,
    )


def expected_wait(limiter: OrderLimiter, clock: Clock) -> float | None:
    """Seconds (of ``clock``) a new order would wait for a permit now; ``None``: unknown.

    The next permit's time, plus one window (and the default margin) for every ``limit``
    acquirers already queued: the limiter grants a window's worth at once, in order.
    """
    at = limiter.next_free_at()
    if at is None:
        return None
    rounds = limiter.queued() // limiter.limit
    hold = limiter.window * (1 + DEFAULT_MARGIN_SHARE)
    return max(0.0, at - clock.monotonic()) + rounds * hold


async def acquire_within(
    limiter: OrderLimiter, *, front: bool, deadline: float | None, clock: Clock
) -> Permit:
    """A permit, or :class:`WaitExpired` when ``deadline`` (``clock.monotonic()``) passes."""
    if deadline is None:
        return await limiter.acquire(front=front)
    # Never below zero: max_wait=0 still takes a permit that is free right now (a free
    # permit is granted before the alarm task first runs).
    remaining = max(0.0, deadline - clock.monotonic())
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(None) as bound:
            # The deadline is on the client's clock (a scaled one in a sandbox run), which
            # only offers sleep(): a side task sleeps on it and then expires the bound.
            async def ring() -> None:
                await clock.sleep(remaining)
                bound.reschedule(loop.time())

            alarm = loop.create_task(ring())
            try:
                return await limiter.acquire(front=front)
            finally:
                alarm.cancel()
    except TimeoutError:
        raise WaitExpired from None


async def run_to_the_end(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` to its end even if the caller is cancelled meanwhile (then re-raise)."""
    task = asyncio.get_running_loop().create_task(work)
    cancelled = False
    while not task.done():
        try:
            await finished(task)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return task.result()


def finished(task: asyncio.Future[Any]) -> asyncio.Future[None]:
    """A future done when ``task`` is: awaiting it, a cancelled caller cancels only it.

    asyncio.shield without its extras (the task is ours and nobody else awaits it; its
    outcome is read from the task itself), for a task made on every order.
    """
    waiter: asyncio.Future[None] = task.get_loop().create_future()

    def done(_: object) -> None:
        if not waiter.done():
            waiter.set_result(None)

    task.add_done_callback(done)
    return waiter


async def finish_abandoned(
    task: asyncio.Future[T],
    *,
    limiter: OrderLimiter,
    permit: Permit,
    sent: Callable[[BaseException | None], bool],
    settle: Settle,
) -> None:
    """Read the answer of ``task`` whose caller was cancelled; release; hand it to ``settle``.

    ``sent(error)`` says whether the request may have reached the server (``None``: it
    succeeded). Further cancellations of the caller are held back until this is done.
    """

    async def finish() -> None:
        outcome: object
        try:
            outcome = await task
        except Exception as exc:
            outcome = exc
        error = outcome if isinstance(outcome, Exception) else None
        await limiter.release(permit, sent=sent(error))
        await settle(outcome)

    # The caller's cancellation is re-raised by our caller, once.
    with contextlib.suppress(asyncio.CancelledError):
        await run_to_the_end(finish())
