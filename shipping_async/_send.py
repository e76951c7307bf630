"""The retry loop: one operation sent again and again until it succeeds or must raise.

The rules are drawn in :mod:`shipping_async._retry`, whose :func:`~shipping_async._retry.decide`
says what follows a failure; this module carries them out: a permit of the order limiter
per attempt and its release as the answer says, the order intent recorded at the request's
write (:mod:`shipping_async._send_gate`) and withdrawn once nothing was created, the
limiter's pause after a 429, the backoff between other re-sends, and a cancelled caller's
answer read to the end.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

from shipping_async._order_wait import (
    Settle,
    WaitExpired,
    acquire_within,
    finish_abandoned,
    finished,
    wait_timeout,
)
from shipping_async._retry import (
    Operation,
    OrderIntent,
    Retry,
    RetryPolicy,
    decide,
    never_written,
    order_intent,
)
from shipping_async._send_gate import SendGate, send_gate, stopped_at
from shipping_async.clock import Clock
from shipping_async.errors import (
    APIError,
    APIStatusError,
    OutcomeUnknownError,
    RateLimitError,
    ShippingError,
)
from shipping_async.limiter import OrderLimiter, Permit

__all__ = ["MAX_LEARNED_SECONDS", "retry_after", "send_with_retries"]

T = TypeVar("T")

_log = logging.getLogger("shipping_async")

#: The longest window or wait (real seconds) learned from an answer; a longer one is
#: refused and logged. The API's own window is 60 s.
MAX_LEARNED_SECONDS = 3600.0


async def send_with_retries(
    attempt: Callable[[], Coroutine[Any, Any, T]],
    *,
    operation: Operation,
    policy: RetryPolicy,
    clock: Clock,
    limiter: OrderLimiter | None = None,
    max_wait: float | None = None,
    settle: Settle | None = None,
    before_send: Callable[[float], Awaitable[None] | None] | None = None,
    gate_at_write: bool = False,
) -> T:
    """Run ``attempt`` until it succeeds or :func:`decide` says to raise.

    With a ``limiter``, every attempt holds a permit; it is released with ``sent=False``
    only when the request never left (or the task was cancelled before sending).
    ``max_wait`` bounds the time spent waiting for permits (the first and any after a
    429) on ``clock``: past it, :class:`~shipping_async.errors.OrderWaitTimeoutError`.
    With ``settle``, a caller cancelled while its request may be on the wire does not
    abandon it: the answer is read, the permit released accordingly, ``settle`` gets the
    result (or error), then the ``CancelledError`` goes on. ``before_send(waited)`` is
    called once a permit is held, with the seconds waited for permits so far, and what
    it returns (if not ``None``) awaited; if that raises, the permit goes back unused
    and its error goes up. ``gate_at_write``: ``attempt``
    opens the attempt's :class:`~shipping_async._send_gate.SendGate` (found in
    :data:`~shipping_async._send_gate.send_gate`) itself right before it writes the
    request (a :class:`~shipping_async._send_gate.GatedBody`); otherwise it is opened just
    before ``attempt``. The gate records the order intent.
    """
    if limiter is None:
        return await _send_unlimited(attempt, operation=operation, policy=policy, clock=clock)
    delays: Iterator[float] | None = None
    retries = rate_limited = 0
    front = False
    started = clock.monotonic()
    deadline = None if max_wait is None else started + max_wait
    intent = order_intent.get()
    while True:
        try:
            if deadline is None:  # acquire_within's way without a deadline, a call less
                permit = await limiter.acquire(front=front)
            else:
                permit = await acquire_within(limiter, front=front, deadline=deadline, clock=clock)
        except WaitExpired:
            assert max_wait is not None
            raise wait_timeout(
                operation.customer_reference,
                max_wait=max_wait,
                limiter=limiter,
                clock=clock,
                refused=rate_limited,
            ) from None
        if before_send is not None:
            try:
                check = before_send(clock.monotonic() - started)
                if check is not None:
                    await check
            except BaseException:
                await limiter.release(permit, sent=False)
                raise
        gate = None
        if intent is not None:
            gate = SendGate(intent.granted, at_write=gate_at_write, sending=intent.sending)
            if not gate.at_write:
                try:
                    await gate.open()
                except BaseException:
                    await _not_sent(limiter, permit, intent)
                    raise
        owned: asyncio.Task[T] | None = None
        context = send_gate.set(gate)
        try:
            if settle is not None:
                # Our own task, so that a cancelled caller can leave it running.
                owned = asyncio.get_running_loop().create_task(attempt())
                await finished(owned)
                result = owned.result()
            else:
                result = await attempt()
        except APIError as exc:
            error: APIError = exc
        except asyncio.CancelledError:
            if owned is not None:
                assert settle is not None
                await finish_abandoned(
                    owned,
                    limiter=limiter,
                    permit=permit,
                    sent=functools.partial(_may_have_arrived, gate=gate),
                    settle=settle,
                )
            else:
                await _release_after_failure(limiter, permit, intent, gate)
            raise
        except BaseException:
            await _release_after_failure(limiter, permit, intent, gate)
            raise
        else:
            await limiter.release(permit, sent=True)
            return result
        finally:
            send_gate.reset(context)
        await _settled(gate)
        if stopped_at(gate) and gate is not None:
            refusal = gate.refusal()
            if refusal is not None:  # the intent itself was refused: nothing was sent
                await _not_sent(limiter, permit, intent)
                raise refusal from None
        written = not stopped_at(gate) and not never_written(error)
        await limiter.release(permit, sent=written)
        if intent is not None and (isinstance(error, RateLimitError) or not written):
            await intent.withdrawn()  # proven not created: no intent waits or fails
        step = decide(
            error,
            operation,
            policy,
            retries=retries,
            rate_limited=rate_limited,
            limited=True,
            written=written,
        )
        step = _retry_or_raise(step)
        # A re-sent order goes to the head of the limiter's queue: it was first in line.
        front = True
        if step.pause_limiter and isinstance(error, RateLimitError):
            rate_limited += 1
            await _pause_after_429(
                limiter,
                error,
                step,
                operation=operation,
                policy=policy,
                clock=clock,
                rate_limited=rate_limited,
            )
            continue
        retries += 1
        delays = await _back_off(
            error, step, retries, delays, operation=operation, policy=policy, clock=clock
        )


async def _send_unlimited(
    attempt: Callable[[], Awaitable[T]],
    *,
    operation: Operation,
    policy: RetryPolicy,
    clock: Clock,
) -> T:
    """:func:`send_with_retries` without a limiter: no permit, no intent, no gate; only
    the retry rules and the backoff between re-sends."""
    try:
        return await attempt()
    except APIError as exc:
        return await retry_after(exc, attempt, operation=operation, policy=policy, clock=clock)


async def retry_after(
    error: APIError,
    attempt: Callable[[], Awaitable[T]],
    *,
    operation: Operation,
    policy: RetryPolicy,
    clock: Clock,
) -> T:
    """Carry on :func:`send_with_retries` without a limiter after a first attempt raised
    ``error``: re-send while the retry rules allow, else raise what they say.

    (The client makes the first attempt itself, so that a request that succeeds at once
    passes through one coroutine less.)
    """
    delays: Iterator[float] | None = None
    retries = 0
    while True:
        step = decide(
            error,
            operation,
            policy,
            retries=retries,
            rate_limited=0,
            limited=False,
            written=not never_written(error),
        )
        step = _retry_or_raise(step)
        retries += 1
        delays = await _back_off(
            error, step, retries, delays, operation=operation, policy=policy, clock=clock
        )
        try:
            return await attempt()
        except APIError as exc:
            error = exc


def _retry_or_raise(step: Retry | ShippingError) -> Retry:
    """``step`` when it is a re-send; else its error raised (an unknown outcome logged)."""
    if isinstance(step, ShippingError):
        if isinstance(step, OutcomeUnknownError):
            _log.warning("%s", step)
        raise step
    return step


async def _back_off(
    error: APIError,
    step: Retry,
    retries: int,
    delays: Iterator[float] | None,
    *,
    operation: Operation,
    policy: RetryPolicy,
    clock: Clock,
) -> Iterator[float] | None:
    """Wait before re-send number ``retries``: the answer's own wait, else the policy's
    next delay (``delays``, made on first use and returned for the next re-send)."""
    if step.wait is not None:
        delay = clock.from_real(step.wait)
    else:
        if delays is None:
            delays = policy.delays()
        delay = next(delays)
    _log.info(
        "retrying %s %s in %.3g s after %s (retry %d of %d)",
        operation.method,
        operation.path,
        delay,
        _describe(error),
        retries,
        policy.max_retries,
    )
    await clock.sleep(delay)
    return delays


async def _pause_after_429(
    limiter: OrderLimiter,
    error: RateLimitError,
    step: Retry,
    *,
    operation: Operation,
    policy: RetryPolicy,
    clock: Clock,
    rate_limited: int,
) -> None:
    """Pause the order limiter for what the 429 asks (or its window), then let it re-send."""
    # The server states its window and Retry-After in real seconds.
    window = _learnable(error.window, "window of the 429 text", error)
    wait = _learnable(step.wait, "Retry-After", error)
    limit = error.limit if error.limit is not None and error.limit >= 1 else None
    real_window = clock.from_real(window) if window is not None else None
    seconds = clock.from_real(wait) if wait is not None else None
    seconds = seconds if seconds is not None else (real_window or limiter.window)
    _log.warning(
        "429 on %s %s (%s); pausing order creation for %.3g s, then re-sending "
        "(rate-limit retry %d of %d)",
        operation.method,
        operation.path,
        error.error or "no text",
        seconds,
        rate_limited,
        policy.max_rate_limit_retries,
    )
    await limiter.pause(seconds, limit=limit, window=real_window)


def _may_have_arrived(error: BaseException | None, *, gate: SendGate | None) -> bool:
    if stopped_at(gate):
        return False
    return error is None or not never_written(error)


async def _settled(gate: SendGate | None) -> None:
    if gate is not None:
        await asyncio.shield(gate.settled())


async def _release_after_failure(
    limiter: OrderLimiter, permit: Permit, intent: OrderIntent | None, gate: SendGate | None
) -> None:
    """A cancelled or broken attempt: unsent when the gate stopped it, otherwise the
    request may have been written and the permit counts as sent."""
    await _settled(gate)
    if stopped_at(gate):
        await _not_sent(limiter, permit, intent)
    else:
        await limiter.release(permit, sent=True)


async def _not_sent(limiter: OrderLimiter, permit: Permit, intent: OrderIntent | None) -> None:
    """The request was never written: the permit goes back unused, the intent (if it was
    recorded before a cancellation reached the gate) is taken back."""
    await limiter.release(permit, sent=False)
    if intent is not None:
        await asyncio.shield(intent.withdrawn())


def _learnable(seconds: float | None, what: str, error: APIError) -> float | None:
    """``seconds`` from an answer, or ``None`` (logged) when longer than anyone should wait.

    A 429 text or a Retry-After is the server's word, and a broken or hostile server can
    say anything: ``1 of 1 in 315360000 seconds`` would pause every order for ten years.
    """
    if seconds is None or seconds <= MAX_LEARNED_SECONDS:
        return seconds
    _log.warning(
        "%s %s: refused the %s of %.0f s (over the %.0f s cap); keeping our own",
        error.method,
        error.path,
        what,
        seconds,
        MAX_LEARNED_SECONDS,
    )
    return None


def _describe(error: APIError) -> str:
    if isinstance(error, APIStatusError):
        return f"status {error.status}"
    cause = error.__cause__
    return type(cause).__name__ if cause is not None else type(error).__name__
