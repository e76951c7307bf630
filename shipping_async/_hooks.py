"""Typed client hooks: what an observer (metrics, traces, logs) sees of every API call.

The SDK itself depends on no metrics or tracing library: it calls the hooks given to
:class:`~shipping_async.AsyncShippingClient` (``hooks=[...]``), and
:mod:`shipping_async.telemetry` subscribes Prometheus metrics and OpenTelemetry spans to
them. Like aiohttp's ``TraceConfig`` signals, every hook receives the :class:`APICall`
being made; an observer keeps what it needs between two hooks in ``call.state[self]``.

One call (``client.orders.get(7)``) is one ``on_call_start`` and one ``on_call_end``;
between them each attempt sent is an ``on_request`` and an ``on_response`` (a re-send is
announced by ``on_retry`` first), and an order creation's limiter permits show as
``on_permit_waiting`` / ``on_permit_granted`` / ``on_permit_released``. Hooks run
synchronously in the task making the call: they must be quick and must not raise.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final

from shipping_async._retry import Operation
from shipping_async.errors import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    ConfigurationError,
    OutcomeUnknownError,
    RateLimitError,
)
from shipping_async.limiter import OrderLimiter, Permit

__all__ = ["APICall", "ClientHooks", "Subscribers", "current_call", "observe_call", "route_of"]

# An id in a path is a run of digits between slashes: /orders/7001/waybills.
_ID_SEGMENT: Final = re.compile(r"/\d+(?=/|$)")


def route_of(path: str) -> str:
    """The route template of a concrete path, fit for a bounded label or a span name.

    >>> route_of("/orders/7001/schedule_pickups")
    '/orders/{id}/schedule_pickups'
    """
    return _ID_SEGMENT.sub("/{id}", path)


@dataclass(slots=True, eq=False, kw_only=True)
class APICall:
    """One API call as the hooks see it; never the token, the URL's host or a body.

    ``operation`` is the SDK's name for it (``create_order``), ``route`` the path template
    (``/orders/{id}``). ``attempts`` counts the requests sent so far, ``status`` is the
    last answer's HTTP status (``None`` before one, or after a transport error, whose
    class name is then in ``error``).
    """

    operation: str
    method: str
    route: str
    attempts: int = 0
    status: int | None = None
    error: str | None = None
    #: Per-observer scratch space, keyed by the observer: a span, a start time.
    state: dict[object, object] = field(default_factory=dict)

    @property
    def retries(self) -> int:
        """Re-sends so far: attempts beyond the first."""
        return max(0, self.attempts - 1)


_CURRENT: ContextVar[APICall | _Unobserved | None] = ContextVar("shipping_async_call", default=None)


def current_call() -> APICall | None:
    """The API call the running task is making, for log records (``None`` outside one)."""
    call = _CURRENT.get()
    if call is None or type(call) is APICall:
        return call
    assert isinstance(call, _Unobserved)
    return call.record()


class ClientHooks:
    """Subclass and override the hooks you observe; the others do nothing.

    >>> class Printer(ClientHooks):
    ...     def on_response(self, call: APICall, seconds: float) -> None:
    ...         print(call.method, call.route, call.status, f"{seconds:.3f}")
    >>> client = AsyncShippingClient(hooks=[Printer()])  # doctest: +SKIP

    Durations are real seconds (``time.perf_counter``), whatever clock the client runs on.
    """

    def on_call_start(self, call: APICall) -> None:
        """A client method was called; nothing was sent yet."""

    def on_call_end(self, call: APICall, error: BaseException | None) -> None:
        """The call returned (``error`` is ``None``) or raised ``error``."""

    def on_request(self, call: APICall) -> None:
        """An attempt is about to be sent (``call.attempts`` already counts it)."""

    def on_response(self, call: APICall, seconds: float) -> None:
        """An attempt ended: ``call.status`` (or ``call.error``) says how."""

    def on_retry(self, call: APICall, reason: str) -> None:
        """The next attempt is a re-send, because of ``reason``.

        Reasons: ``rate_limited`` (429), ``server_error`` (5xx), ``status`` (another
        status), ``timeout``, ``connection``, ``invalid_response``.
        """

    def on_rate_limited(self, call: APICall, error: RateLimitError) -> None:
        """A 429: ``error.limit``/``error.window`` carry what the server's text said."""

    def on_outcome_unknown(self, call: APICall, error: OutcomeUnknownError) -> None:
        """The request was written but no usable answer came: check before re-sending."""

    def on_permit_waiting(self, call: APICall) -> None:
        """An order creation starts waiting for an order-limiter permit."""

    def on_permit_granted(self, call: APICall, waited: float | None) -> None:
        """The permit came after ``waited`` seconds (``None``: cancelled while waiting)."""

    def on_permit_released(self, call: APICall) -> None:
        """The permit was given back to the limiter."""

    def on_paused(self, call: APICall, seconds: float) -> None:
        """After a 429 the order limiter grants nothing for ``seconds`` (its clock's)."""


class Subscribers:
    """A client's hooks, sorted by hook: for each, the bound methods that override it.

    Built once per client, so a call never dispatches to the no-op defaults of hooks an
    observer did not override (each is a Python call on the request's hot path).
    """

    __slots__ = (
        "hooks",
        "on_call_end",
        "on_call_start",
        "on_outcome_unknown",
        "on_paused",
        "on_permit_granted",
        "on_permit_released",
        "on_permit_waiting",
        "on_rate_limited",
        "on_request",
        "on_response",
        "on_retry",
    )

    def __init__(self, hooks: Iterable[ClientHooks] = ()) -> None:
        self.hooks = tuple(hooks)
        for hook in self.hooks:
            if not isinstance(hook, ClientHooks):
                raise ConfigurationError(
                    f"hooks: expected ClientHooks instances, got {type(hook).__name__}"
                )
        self.on_call_start: tuple[Callable[[APICall], None], ...] = self._overriding(
            "on_call_start"
        )
        self.on_call_end: tuple[Callable[[APICall, BaseException | None], None], ...] = (
            self._overriding("on_call_end")
        )
        self.on_request: tuple[Callable[[APICall], None], ...] = self._overriding("on_request")
        self.on_response: tuple[Callable[[APICall, float], None], ...] = self._overriding(
            "on_response"
        )
        self.on_retry: tuple[Callable[[APICall, str], None], ...] = self._overriding("on_retry")
        self.on_rate_limited: tuple[Callable[[APICall, RateLimitError], None], ...] = (
            self._overriding("on_rate_limited")
        )
        self.on_outcome_unknown: tuple[Callable[[APICall, OutcomeUnknownError], None], ...] = (
            self._overriding("on_outcome_unknown")
        )
        self.on_permit_waiting: tuple[Callable[[APICall], None], ...] = self._overriding(
            "on_permit_waiting"
        )
        self.on_permit_granted: tuple[Callable[[APICall, float | None], None], ...] = (
            self._overriding("on_permit_granted")
        )
        self.on_permit_released: tuple[Callable[[APICall], None], ...] = self._overriding(
            "on_permit_released"
        )
        self.on_paused: tuple[Callable[[APICall, float], None], ...] = self._overriding("on_paused")

    def _overriding(self, name: str) -> tuple[Any, ...]:
        default = getattr(ClientHooks, name)
        return tuple(
            getattr(hook, name) for hook in self.hooks if getattr(type(hook), name) is not default
        )


def _reason(error: BaseException) -> str:
    if isinstance(error, RateLimitError) or (
        isinstance(error, APIStatusError) and error.status == 429
    ):
        return "rate_limited"
    if isinstance(error, APIStatusError):
        return "server_error" if error.status >= 500 else "status"
    if isinstance(error, APITimeoutError):
        return "timeout"
    if isinstance(error, APIConnectionError):
        return "connection"
    return "invalid_response"


def _new_call(operation: Operation) -> APICall:
    """The record of a call of ``operation`` about to start."""
    return APICall(
        operation=operation.name,
        method=operation.method,
        route=operation.route or route_of(operation.path),
    )


class _Observed:
    """One call's events, fanned out to the client's hooks (see :func:`observe_call`)."""

    __slots__ = ("_call", "_hooks", "_reason", "_reset", "_sent_at")

    def __init__(self, hooks: Subscribers, operation: Operation) -> None:
        self._hooks = hooks
        self._call = _new_call(operation)
        self._reason: str | None = None
        self._sent_at = 0.0
        self._reset: Token[APICall | _Unobserved | None] | None = None

    # -- the call: ``with observed:`` around the retry loop --------------------------------

    def __enter__(self) -> _Observed:
        self._reset = _CURRENT.set(self._call)
        for hook in self._hooks.on_call_start:
            hook(self._call)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        call = self._call
        if exc is not None and isinstance(exc, OutcomeUnknownError):
            for unknown in self._hooks.on_outcome_unknown:
                unknown(call, exc)
        for hook in self._hooks.on_call_end:
            hook(call, exc)
        if self._reset is not None:
            _CURRENT.reset(self._reset)

    # -- one attempt: ``sending()`` before the exchange, ``answered()`` after it -----------

    def sending(self) -> None:
        """An attempt is about to be sent."""
        call = self._call
        if self._reason is not None:
            for retry in self._hooks.on_retry:
                retry(call, self._reason)
        call.attempts += 1
        call.status = call.error = None
        hooks = self._hooks
        for hook in hooks.on_request:
            hook(call)
        if hooks.on_response:
            self._sent_at = time.perf_counter()

    def answered(self, error: BaseException | None) -> None:
        """The attempt ended: with its answer read (``error`` is ``None``) or ``error``."""
        call = self._call
        if error is None:
            self._reason = None
        else:
            if isinstance(error, APIStatusError):
                call.status = error.status
            else:
                call.error = type(error.__cause__ or error).__name__
            self._reason = _reason(error)
        hooks = self._hooks
        if hooks.on_response:
            seconds = time.perf_counter() - self._sent_at
            for hook in hooks.on_response:
                hook(call, seconds)
        if error is not None and isinstance(error, RateLimitError):
            for limited in hooks.on_rate_limited:
                limited(call, error)

    def status(self, status: int) -> None:
        """The status line of the current attempt's answer arrived."""
        self._call.status = status

    def limiter(self, limiter: OrderLimiter) -> OrderLimiter:
        """``limiter`` as this call uses it, its permits and pauses reported (``limiter``
        itself when no hook observes permits)."""
        hooks = self._hooks
        if not (
            hooks.on_permit_waiting
            or hooks.on_permit_granted
            or hooks.on_permit_released
            or hooks.on_paused
        ):
            return limiter
        return _ObservedLimiter(limiter, self._call, hooks)


class _Unobserved:
    """:class:`_Observed` for a client without hooks: only the call record the log lines
    read (``operation``, ``status``), kept exactly as ``_Observed`` keeps it.

    The record (an :class:`APICall`) is made only when a log line asks for it
    (:func:`current_call`), which a call that logs nothing never does; until then its
    counts are kept here.
    """

    __slots__ = ("_attempts", "_error", "_operation", "_record", "_reset", "_status")

    def __init__(self, operation: Operation) -> None:
        self._operation = operation
        self._attempts = 0
        self._status: int | None = None
        self._error: str | None = None
        self._record: APICall | None = None
        self._reset: Token[APICall | _Unobserved | None] | None = None

    def record(self) -> APICall:
        """The call record, as :class:`_Observed` would keep it, up to date."""
        call = self._record
        if call is None:
            call = self._record = _new_call(self._operation)
        call.attempts, call.status, call.error = self._attempts, self._status, self._error
        return call

    def __enter__(self) -> _Unobserved:
        self._reset = _CURRENT.set(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._reset is not None:
            _CURRENT.reset(self._reset)

    # A record handed out is kept up to date from then on, as _Observed keeps its own.

    def sending(self) -> None:
        self._attempts += 1
        self._status = self._error = None
        if self._record is not None:
            self.record()

    def answered(self, error: BaseException | None) -> None:
        if error is None:
            return
        if isinstance(error, APIStatusError):
            self._status = error.status
        else:
            self._error = type(error.__cause__ or error).__name__
        if self._record is not None:
            self.record()

    def status(self, status: int) -> None:
        self._status = status
        if self._record is not None:
            self.record()

    def limiter(self, limiter: OrderLimiter) -> OrderLimiter:
        return limiter


class _ObservedLimiter:
    """The client's order limiter for one call, reporting permits and pauses to the hooks."""

    __slots__ = ("_call", "_hooks", "_limiter")

    def __init__(self, limiter: OrderLimiter, call: APICall, hooks: Subscribers):
        self._limiter = limiter
        self._call = call
        self._hooks = hooks

    @property
    def limit(self) -> int:
        return self._limiter.limit

    @property
    def window(self) -> float:
        return self._limiter.window

    def next_free_at(self) -> float | None:
        return self._limiter.next_free_at()

    def queued(self) -> int:
        return self._limiter.queued()

    async def acquire(self, *, front: bool = False) -> Permit:
        for hook in self._hooks.on_permit_waiting:
            hook(self._call)
        started = time.perf_counter()
        waited: float | None = None
        try:
            permit = await self._limiter.acquire(front=front)
            waited = time.perf_counter() - started
        finally:
            for granted in self._hooks.on_permit_granted:
                granted(self._call, waited)
        return permit

    async def release(self, permit: Permit, *, sent: bool) -> None:
        try:
            await self._limiter.release(permit, sent=sent)
        finally:
            for hook in self._hooks.on_permit_released:
                hook(self._call)

    async def pause(
        self, seconds: float, *, limit: int | None = None, window: float | None = None
    ) -> None:
        await self._limiter.pause(seconds, limit=limit, window=window)
        for hook in self._hooks.on_paused:
            hook(self._call, seconds)


def observe_call(hooks: Subscribers, operation: Operation) -> _Observed | _Unobserved:
    """The observer of one call of ``operation``: ``with`` it around the retry loop,
    ``sending()`` and ``answered(error)`` around each exchange, and pass the order limiter
    through ``observer.limiter(...)``. Without hooks it only marks the call for the log
    records."""
    if not hooks.hooks:
        return _Unobserved(operation)
    return _Observed(hooks, operation)
