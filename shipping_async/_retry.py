"""Every retry decision of the client: what is re-sent, after how long, and what is raised.

The rules (kept here and nowhere else):

- Idempotent requests (GET, PUT, PATCH, DELETE and POST /quotes) are re-sent after a
  connection error, a timeout, a 5xx or a 429, up to ``max_retries`` times, waiting an
  exponential backoff with full jitter, or what ``Retry-After`` asks for.
- Other POSTs (orders, waybills, pickups, webhooks) are re-sent only when the server
  certainly did not act: after a 429, or when the connection failed before a byte of the
  request was written. Any other failure after writing raises
  :class:`~shipping_async.errors.OutcomeUnknownError` (for orders
  :class:`~shipping_async.errors.OrderOutcomeUnknownError`): a reset, a read timeout, a
  2xx whose identity cannot be read (also an ``APIResponseValidationError``) and a 5xx
  (also an ``InternalServerError``). The SDK never sends the same order twice on a guess.
- POST /orders goes through the order limiter: a permit per attempt, given back with
  ``sent=False`` only when the request never left; a 429 pauses the limiter and re-sends
  the order at the front of its queue, at most ``max_rate_limit_retries`` times.
- A caller that journals its orders (the bulk runner) sets :data:`order_intent` around
  the call: its ``granted()`` runs once a permit is granted and the connection is open,
  inside the writing of the request (the intent is the send, see
  :mod:`shipping_async._send_gate`), and its ``withdrawn()`` as soon as an answer proves
  nothing was created (a 429), before any wait. A connection that never opens records
  no intent. Nothing waits in the limiter, a pause or a backoff with an intent recorded.

backoff (no release since 2022) is only used for its wait generators, in
:meth:`RetryPolicy.delays`; swapping it for tenacity's ``wait_random_exponential`` touches
that one method. Every wait goes through the client's :class:`~shipping_async.clock.Clock`.

The decisions are pure and live here; :mod:`shipping_async._send` is the loop that acts on
them (permits, the order intent, the pause after a 429, the waits).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Protocol

import aiohttp
import backoff
import msgspec

from shipping_async.errors import (
    APIConnectionError,
    APIError,
    APIResponseValidationError,
    APIStatusError,
    InternalServerError,
    OutcomeUnknownError,
    RateLimitError,
    ShippingError,
    outcome_unknown,
)

__all__ = [
    "Operation",
    "OrderIntent",
    "Retry",
    "RetryPolicy",
    "decide",
    "never_written",
    "order_intent",
    "parse_retry_after",
]

# aiohttp raises these only from ``connector.connect()``, before the request is written:
# DNS, refused, TLS handshake, proxy, and the connect timeout. Anything else (a reset,
# ServerDisconnectedError, a read timeout, a truncated body) may come after the server
# got the whole request.
_NEVER_WRITTEN: tuple[type[BaseException], ...] = (
    aiohttp.ClientConnectorError,
    aiohttp.ConnectionTimeoutError,
)

_IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "PATCH", "DELETE"})
# POSTs that may be repeated: a second quote binds the caller to nothing.
_IDEMPOTENT_POSTS = frozenset({"create_quote"})


class OrderIntent(Protocol):
    """Journals an order's intent exactly around its sends (see the module docstring)."""

    async def granted(self) -> None:
        """A permit is granted: record the intent now (raise to send nothing)."""
        ...

    def sending(self) -> None:
        """The intent is recorded and the request's first byte follows at once, with
        nothing run in between (raise to send nothing)."""
        ...

    async def withdrawn(self) -> None:
        """The last attempt certainly created nothing: take the intent back."""
        ...


#: Set by a caller around ``orders.create`` to journal the intent at the permit grant.
order_intent: ContextVar[OrderIntent | None] = ContextVar("order_intent", default=None)


class Operation(msgspec.Struct, frozen=True, kw_only=True):
    """One API operation as far as retrying goes: its name, method and concrete path.

    ``customer_reference`` is set for order creation, so that an unknown outcome names
    the order to look for. ``route``: the path's template (``/orders/{id}``) for the
    hooks, when the caller knows it (else it is worked out from ``path``).
    """

    name: str
    method: str
    path: str
    customer_reference: str | None = None
    route: str = ""

    @property
    def idempotent(self) -> bool:
        """May this request be sent twice without doing the work twice?"""
        if self.method == "POST":
            return self.name in _IDEMPOTENT_POSTS
        return self.method in _IDEMPOTENT_METHODS


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How often and how long to retry. ``max_retries`` counts re-sends, not attempts."""

    max_retries: int = 2
    max_rate_limit_retries: int = 5
    base_delay: float = 0.5
    max_delay: float = 8.0
    # A Retry-After longer than this is not waited for: the error goes to the caller.
    max_retry_after: float = 120.0
    jitter: Callable[[float], float] = field(default=backoff.full_jitter)

    def __post_init__(self) -> None:
        for name in ("max_retries", "max_rate_limit_retries"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name}: must be an integer >= 0, got {value!r}")
        for name in ("base_delay", "max_delay", "max_retry_after"):
            value = getattr(self, name)
            if not 0 <= value < math.inf:
                raise ValueError(f"{name}: must be a finite number >= 0, got {value!r}")

    def delays(self) -> Iterator[float]:
        """Backoff delays: ``base_delay * 2**n`` capped at ``max_delay``, full jitter."""
        wait = backoff.expo(base=2, factor=self.base_delay, max_value=self.max_delay)
        next(wait)  # backoff's generators yield once before the first value
        for value in wait:
            yield self.jitter(value)


@dataclass(frozen=True, slots=True)
class Retry:
    """Re-send. ``wait``: the seconds the server asked for, or ``None`` for the backoff.

    ``pause_limiter``: a 429 on a limited order; pause the order limiter and re-send at
    the front of its queue instead of backing off.
    """

    wait: float | None = None
    pause_limiter: bool = False


def never_written(error: BaseException) -> bool:
    """True when the request certainly never reached the server (safe to re-send)."""
    return isinstance(error.__cause__, _NEVER_WRITTEN)


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP date."""
    if not value:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - now).total_seconds()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def decide(
    error: APIError,
    operation: Operation,
    policy: RetryPolicy,
    *,
    retries: int,
    rate_limited: int,
    limited: bool,
    written: bool = True,
) -> Retry | ShippingError:
    """What to do after ``error``: a :class:`Retry`, or the error to raise.

    ``retries`` re-sends were made so far for transport errors, 5xx and 429s,
    ``rate_limited`` for 429s of a limited order (``limited``: it holds limiter permits).
    ``written=False``: the request certainly never left (whatever ``error`` says).
    """
    if isinstance(error, RateLimitError):
        if limited:
            if rate_limited >= policy.max_rate_limit_retries:
                return _budget_taken(error, rate_limited)
            return Retry(error.retry_after, pause_limiter=True)
        return _bounded(Retry(error.retry_after), error, retries, policy)
    if isinstance(error, InternalServerError):
        # A non-idempotent POST that got a 5xx may have acted (behind a gateway a 502
        # often follows a created order): unknown, never re-sent; still a 5xx error.
        if operation.idempotent:
            return _bounded(Retry(error.retry_after), error, retries, policy)
        return _outcome_unknown(error, operation)
    if isinstance(error, APIStatusError):
        return error
    if isinstance(error, APIConnectionError):
        if operation.idempotent or not written or never_written(error):
            return _bounded(Retry(), error, retries, policy)
        return _outcome_unknown(error, operation)
    if isinstance(error, APIResponseValidationError) and not operation.idempotent:
        return _outcome_unknown(error, operation)
    return error


def _bounded(retry: Retry, error: APIError, retries: int, policy: RetryPolicy) -> Retry | APIError:
    if retries >= policy.max_retries:
        return error
    if retry.wait is not None and retry.wait > policy.max_retry_after:
        return error
    return retry


def _budget_taken(error: RateLimitError, attempts: int) -> RateLimitError:
    usage = ""
    if error.count is not None and error.limit is not None:
        window = f" in {error.window:g} s" if error.window is not None else ""
        usage = f" (server: {error.count} of {error.limit}{window})"
    exhausted = RateLimitError(
        status=error.status,
        error=error.error,
        errors=error.errors,
        body=error.body,
        method=error.method,
        path=error.path,
        retry_after=error.retry_after,
        headers=error.headers,
    )
    # The message is the point of this error: the limiter kept our own budget, so the
    # 429s mean someone else spends the account's orders.
    exhausted.args = (
        f"429 on {error.method} {error.path} {attempts + 1} times in a row{usage}, although "
        "this client's order limiter kept to the limit: another client or process is using "
        "the same account's order budget. Share one order_limiter between clients (a shared "
        "limiter across processes), lower its limit, or raise max_rate_limit_retries.",
    )
    exhausted.__cause__ = error
    return exhausted


def _outcome_unknown(error: APIError, operation: Operation) -> OutcomeUnknownError:
    cause = error.__cause__ if error.__cause__ is not None else error
    what = f"{operation.method} {operation.path}"
    if isinstance(error, InternalServerError):
        happened = f"was answered {error.status} (a server or gateway failed mid-way)"
    elif isinstance(error, APIResponseValidationError):
        happened = "was answered, but what it did cannot be read from the answer"
    else:
        happened = f"was sent but no usable answer came back ({type(cause).__name__})"
    if operation.customer_reference is not None:
        message = (
            f"{what} {happened}: the order may or may not exist. Look for an order with "
            f"customer_reference {operation.customer_reference!r} before creating it again; "
            "the SDK did not re-send it, to avoid a duplicate."
        )
    else:
        message = (
            f"{what} ({operation.name}) {happened}: the server may or may not have acted. "
            "Check the current state before trying again; the SDK did not re-send it."
        )
    return outcome_unknown(
        message,
        cause=error,
        operation=operation.name,
        customer_reference=operation.customer_reference,
    )
