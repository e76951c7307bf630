"""AsyncShippingClient: options and environment, session lifecycle, with_options(), resources."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import ipaddress
import math
import os
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, Unpack

import aiohttp
import msgspec
from yarl import URL

from shipping_async._bounded import DEFAULT_MAX_RESPONSE_BYTES, Deadlines
from shipping_async._decode import Answer
from shipping_async._estimates import EstimateBook
from shipping_async._hooks import ClientHooks, Subscribers, observe_call
from shipping_async._http import Exchange, RequestOptions, Secret, configure_logging
from shipping_async._order_wait import Settle
from shipping_async._retry import Operation, RetryPolicy
from shipping_async._send import retry_after, send_with_retries
from shipping_async.clock import Clock, ScaledClock, SystemClock
from shipping_async.errors import APIError, ConfigurationError
from shipping_async.limiter import OrderLimiter, RollingWindowLimiter
from shipping_async.models._base import enc_hook
from shipping_async.resources import Orders, Quotes, Webhooks

if TYPE_CHECKING:
    from aiolimiter import AsyncLimiter

    from shipping_async.ledger import OrderLedger
    from shipping_async.resources._order_create import CancelledOrder

__all__ = ["AsyncShippingClient"]

T = TypeVar("T")

TOKEN_ENV: Final = "SHIPPING_ACCESS_TOKEN"
TOKEN_FILE_ENV: Final = "SHIPPING_ACCESS_TOKEN_FILE"
BASE_URL_ENV: Final = "SHIPPING_BASE_URL"
#: Runs a client built without ``clock`` on ``ScaledClock(speed)``: what the sandbox's
#: pytest fixture exports, so an app's own client keeps the fast sandbox's time.
CLOCK_SPEED_ENV: Final = "SHIPPING_CLOCK_SPEED"
DECODING_ENV: Final = "SHIPPING_DECODING"

Decoding = Literal["lenient", "strict"]

_LOOPBACK_NAMES = frozenset({"localhost"})
# Request bodies to JSON: one encoder (msgspec.json.encode makes one per call).
_encode = msgspec.json.Encoder(enc_hook=enc_hook).encode


class _SessionHolder:
    """The one aiohttp session of a client and its copies, who must close it, and the
    time limits of their attempts (:class:`~shipping_async._bounded.Deadlines`)."""

    __slots__ = ("_closed", "_owned", "_session", "deadlines")

    def __init__(self, session: aiohttp.ClientSession | None) -> None:
        self._session = session
        self._owned = session is None
        self._closed = False
        self.deadlines: Deadlines | None = None

    def get(self) -> aiohttp.ClientSession:
        """The session (made on first use); :attr:`deadlines` is set from then on."""
        if self._closed:
            raise RuntimeError("this AsyncShippingClient is closed; create a new one")
        if self._session is None or self.deadlines is None:
            # Made on first use, inside the running loop: an aiohttp session (and a
            # timer) belongs to the loop that made it. No await between the check and
            # the assignment, so concurrent first requests still share one session.
            loop = asyncio.get_running_loop()
            if self._session is None:
                self._session = aiohttp.ClientSession()
            self.deadlines = Deadlines(loop)
        return self._session

    async def close(self) -> None:
        self._closed = True
        session, self._session = self._session, None
        if self._owned and session is not None:
            await session.close()


def _check_base_url(base_url: str) -> str:
    url = URL(base_url.rstrip("/"))
    if not url.is_absolute() or not url.host:
        raise ConfigurationError(f"base_url: expected an absolute URL, got {base_url!r}")
    if url.scheme == "https":
        return str(url)
    if url.scheme == "http" and _is_loopback(url.host):
        return str(url)
    raise ConfigurationError(
        f"base_url: {base_url!r} must use https (plain http is allowed only for loopback "
        "hosts: localhost, 127.0.0.0/8, ::1), or the access token would travel in clear"
    )


def _is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _check_decoding(decoding: str | None) -> Decoding:
    value = decoding if decoding is not None else os.environ.get(DECODING_ENV) or "lenient"
    if value == "lenient":
        return "lenient"
    if value == "strict":
        return "strict"
    raise ConfigurationError(
        f"decoding: must be 'lenient' or 'strict' (or set {DECODING_ENV}), got {value!r}"
    )


def _clock_from_env() -> Clock:
    text = os.environ.get(CLOCK_SPEED_ENV, "").strip()
    if not text:
        return SystemClock()
    try:
        speed = float(text)
    except ValueError:
        speed = math.nan
    if not 0 < speed < math.inf:
        raise ConfigurationError(f"{CLOCK_SPEED_ENV}: expected a number > 0, got {text!r}")
    return SystemClock() if speed == 1 else ScaledClock(speed)


def _check_max_wait(max_wait: float | None, name: str = "max_wait") -> float | None:
    if max_wait is None:
        return None
    if isinstance(max_wait, bool) or not 0 <= max_wait < math.inf:
        raise ConfigurationError(
            f"{name}: must be None or a finite number of seconds >= 0, got {max_wait!r}"
        )
    return float(max_wait)


def token_from_environment() -> str | None:
    """``$SHIPPING_ACCESS_TOKEN``, else the content of the file ``$SHIPPING_ACCESS_TOKEN_FILE``
    names (a Docker or Kubernetes secret), whitespace around it dropped; ``None`` if neither.

    Never a command-line argument: those are visible to every user of the machine.
    """
    token = os.environ.get(TOKEN_ENV)
    if token:
        return token
    path = os.environ.get(TOKEN_FILE_ENV)
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as file:
            return file.read().strip() or None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"{TOKEN_FILE_ENV}={path}: cannot read the token: {exc}") from None


def _check_timeout(timeout: float) -> float:
    if isinstance(timeout, bool) or not 0 < timeout < math.inf:
        raise ConfigurationError(
            f"timeout: must be a finite number of seconds > 0, got {timeout!r}"
        )
    return float(timeout)


class AsyncShippingClient:
    """The asyncio client of the shipping API.

    >>> async with AsyncShippingClient() as client:  # doctest: +SKIP
    ...     quote = await client.quotes.create(request)
    ...     order = await client.orders.create(order_request)

    ``token`` and ``base_url`` (which includes ``/client_api/v2``) fall back to
    ``SHIPPING_ACCESS_TOKEN`` and ``SHIPPING_BASE_URL``. One instance serves any number
    of tasks. A ``session`` passed in is used and never closed; otherwise the client makes
    its own on first use and closes it in :meth:`close`. Order creation takes permits from
    ``order_limiter`` (default: 20 per 60 s on ``clock``); pass one limiter to several
    clients to share the account's budget. ``request_rate_limiter`` (an
    ``aiolimiter.AsyncLimiter``) caps the rate of every other request. ``hooks``
    (:class:`~shipping_async.ClientHooks`) observe every call, e.g. the Prometheus metrics
    and OpenTelemetry spans of :mod:`shipping_async.telemetry`.

    ``decoding`` (default ``SHIPPING_DECODING`` or ``"lenient"``): ``"lenient"`` keeps a
    field that does not decode raw in the model's ``undecoded`` (and logs a warning), so
    one odd field never loses an order; ``"strict"`` raises ``APIResponseValidationError``
    for it (for tests that must catch drift from the spec).

    For web apps: ``max_wait`` bounds an order's wait for a permit (seconds of ``clock``;
    per call too) with ``OrderWaitTimeoutError``, which says nothing was sent;
    ``order_ledger`` makes ``customer_reference`` an idempotency key (see
    :mod:`shipping_async.ledger`); ``on_cancelled_order`` is called with a
    :class:`~shipping_async.CancelledOrder` for every create whose caller was cancelled,
    after the SDK has learnt what became of it. After a permit wait of half a rate window
    or more (or past 90 % of ``estimate_validity`` when given), ``orders.create`` re-checks
    an estimate this client quoted and raises ``EstimateExpiredError`` instead of sending.

    ``max_response_bytes`` (default 16 MiB) caps an answer, counted after decompression:
    a longer one is not read and raises ``APIResponseValidationError``.
    """

    quotes: Quotes
    orders: Orders
    webhooks: Webhooks

    def __init__(
        self,
        token: str | None = None,
        *,
        base_url: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 2,
        order_limiter: OrderLimiter | None = None,
        session: aiohttp.ClientSession | None = None,
        clock: Clock | None = None,
        max_rate_limit_retries: int = 5,
        request_rate_limiter: AsyncLimiter | None = None,
        retry_base_delay: float = 0.5,
        retry_max_delay: float = 8.0,
        hooks: Iterable[ClientHooks] = (),
        decoding: Decoding | None = None,
        max_wait: float | None = None,
        order_ledger: OrderLedger | None = None,
        on_cancelled_order: Callable[[CancelledOrder], object] | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        estimate_validity: float | None = None,
    ) -> None:
        token = token if token is not None else token_from_environment()
        if not token:
            raise ConfigurationError(
                f"no access token: pass token=... or set the {TOKEN_ENV} environment variable "
                f"(or {TOKEN_FILE_ENV} to a file holding it)"
            )
        self._token = Secret(token)
        del token  # a frame that raises below must not hold the token in its locals
        base_url = base_url if base_url is not None else os.environ.get(BASE_URL_ENV)
        if not base_url:
            raise ConfigurationError(
                f"no base URL: pass base_url=... (including /client_api/v2) or set the "
                f"{BASE_URL_ENV} environment variable"
            )
        self._base_url = _check_base_url(base_url)
        self._root = URL(self._base_url)
        self._root_path = self._root.raw_path.rstrip("/")
        # The URLs of paths without an id (/quotes, /orders): aiohttp works out a URL's
        # host, origin, ... once per URL object, so the same object serves every request.
        self._urls: dict[str, URL | str] = {}
        self._timeout = _check_timeout(timeout)
        self._lenient = _check_decoding(decoding) == "lenient"
        if isinstance(max_response_bytes, bool) or max_response_bytes < 1:
            raise ConfigurationError(
                f"max_response_bytes: must be a number of bytes >= 1, got {max_response_bytes!r}"
            )
        self._max_response_bytes = int(max_response_bytes)
        self._policy = RetryPolicy(
            max_retries=max_retries,
            max_rate_limit_retries=max_rate_limit_retries,
            base_delay=retry_base_delay,
            max_delay=retry_max_delay,
        )
        self._clock: Clock = clock if clock is not None else _clock_from_env()
        self._order_limiter: OrderLimiter = (
            order_limiter if order_limiter is not None else RollingWindowLimiter(clock=self._clock)
        )
        self._request_rate_limiter = request_rate_limiter
        self._hooks = Subscribers(hooks)
        self._max_wait = _check_max_wait(max_wait)
        self._order_ledger = order_ledger
        self._on_cancelled_order = on_cancelled_order
        self._estimate_validity = _check_max_wait(estimate_validity, "estimate_validity")
        self._estimates = EstimateBook()
        self._sessions = _SessionHolder(session)
        self._is_copy = False
        self._bind_resources()
        configure_logging()

    def _bind_resources(self) -> None:
        self.quotes = Quotes(self)
        self.orders = Orders(self)
        self.webhooks = Webhooks(self)

    @property
    def base_url(self) -> str:
        """The API root, including ``/client_api/v2``."""
        return self._base_url

    @property
    def timeout(self) -> float:
        """Seconds one attempt may take, from connecting to the last byte of the answer."""
        return self._timeout

    @property
    def max_retries(self) -> int:
        """Re-sends allowed per request (see the retry rules in the README)."""
        return self._policy.max_retries

    @property
    def order_limiter(self) -> OrderLimiter:
        """The limiter every order creation of this client (and its copies) goes through."""
        return self._order_limiter

    @property
    def lenient(self) -> bool:
        """Whether answers are decoded leniently (odd fields kept in ``undecoded``)."""
        return self._lenient

    @property
    def estimates(self) -> EstimateBook:
        """The estimates this client quoted (shared by its copies)."""
        return self._estimates

    @property
    def estimate_validity(self) -> float | None:
        """How long an estimate stays valid, if known (the API does not say)."""
        return self._estimate_validity

    @property
    def max_wait(self) -> float | None:
        """The default bound on an order's wait for a permit (``None``: unbounded)."""
        return self._max_wait

    @property
    def order_ledger(self) -> OrderLedger | None:
        """The ledger that makes ``customer_reference`` an idempotency key, if any."""
        return self._order_ledger

    @property
    def on_cancelled_order(self) -> Callable[[CancelledOrder], object] | None:
        """Told what became of every create whose caller was cancelled."""
        return self._on_cancelled_order

    @property
    def clock(self) -> Clock:
        """The clock retry delays and the default limiter run on."""
        return self._clock

    def with_options(
        self,
        *,
        timeout: float | None = None,
        max_retries: int | None = None,
        max_wait: float | None = None,
    ) -> AsyncShippingClient:
        """A copy with other defaults, sharing this client's session and order limiter.

        >>> patient = client.with_options(timeout=120, max_retries=5)  # doctest: +SKIP

        The copy borrows the session: closing it does nothing; close the original.
        """
        clone = copy.copy(self)
        if timeout is not None:
            clone._timeout = _check_timeout(timeout)
        if max_retries is not None:
            clone._policy = dataclasses.replace(self._policy, max_retries=max_retries)
        if max_wait is not None:
            clone._max_wait = _check_max_wait(max_wait)
        clone._is_copy = True
        clone._bind_resources()
        return clone

    async def close(self) -> None:
        """Close the session if this client created it. A no-op on a ``with_options`` copy."""
        if not self._is_copy:
            await self._sessions.close()

    async def __aenter__(self) -> AsyncShippingClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        # getattr: a traceback that prints locals may show a client whose __init__ raised.
        policy = getattr(self, "_policy", None)
        return (
            f"AsyncShippingClient(base_url={getattr(self, '_base_url', None)!r}, "
            f"timeout={getattr(self, '_timeout', None)!r}, "
            f"max_retries={policy.max_retries if policy else None}, token='***')"
        )

    async def _request(
        self,
        operation: Operation,
        answer: Answer[Any, T],
        *,
        body: Any = None,
        json: bytes | None = None,
        form: Callable[[], aiohttp.FormData] | None = None,
        order_limited: bool = False,
        max_wait: float | None = None,
        settle: Settle | None = None,
        raw_sink: Callable[[bytes], None] | None = None,
        before_send: Callable[[float], Awaitable[None] | None] | None = None,
        **options: Unpack[RequestOptions],
    ) -> T:
        """Send ``operation`` under the retry rules and return its ``answer``, read.

        ``body`` is encoded to JSON once (every re-send carries the same bytes), or
        ``json`` is that JSON already; ``form``
        builds a fresh multipart body per attempt. ``order_limited`` requests hold a
        permit of the order limiter, waiting at most ``max_wait``; the others pass the
        ``request_rate_limiter``. ``settle``: see :func:`~shipping_async._send.send_with_retries`.
        ``raw_sink`` gets the bytes of every answer read (the order ledger keeps them).
        """
        policy, timeout = self._policy, self._timeout
        if options:
            unknown = options.keys() - RequestOptions.__annotations__.keys()
            if unknown:
                raise TypeError(
                    f"unexpected option(s) {sorted(unknown)}: only timeout, max_retries"
                )
            if "max_retries" in options:
                policy = dataclasses.replace(policy, max_retries=options["max_retries"])
            if "timeout" in options:
                timeout = _check_timeout(options["timeout"])
        json_body = json if body is None else _encode(body)
        sessions = self._sessions
        session = sessions.get()
        deadlines = sessions.deadlines
        assert deadlines is not None
        if operation.route == operation.path:  # no id in it: one URL for every request
            url = self._urls.get(operation.path)
            if url is None:
                url = self._urls[operation.path] = self._url(operation.path)
        else:
            url = self._url(operation.path)
        observed = observe_call(self._hooks, operation)
        attempt = Exchange(
            session,
            url=url,
            method=operation.method,
            path=operation.path,
            token=self._token,
            answer=answer,
            lenient=self._lenient,
            raw_sink=raw_sink,
            timeout=timeout,
            deadlines=deadlines,
            clock=self._clock,
            json_body=json_body,
            form=form,
            gated=order_limited,
            observer=observed,
            rate=None if order_limited else self._request_rate_limiter,
            max_response_bytes=self._max_response_bytes,
        )
        with observed:
            if not order_limited:
                # send_with_retries' way without a limiter, its first attempt made here.
                try:
                    return await attempt()
                except APIError as exc:
                    return await retry_after(
                        exc, attempt, operation=operation, policy=policy, clock=self._clock
                    )
            return await send_with_retries(
                attempt,
                operation=operation,
                policy=policy,
                clock=self._clock,
                limiter=observed.limiter(self._order_limiter),
                max_wait=_check_max_wait(max_wait),
                settle=settle,
                before_send=before_send,
                # A JSON body opens the gate itself, right before it is written.
                gate_at_write=form is None and json_body is not None,
            )

    def _url(self, path: str) -> URL | str:
        """The URL of ``path`` (``/orders/7``) under the API root."""
        root = self._root
        if root.raw_query_string or root.raw_fragment:
            return self._base_url + path
        # Built from the root's encoded path: parsing the whole text again (yarl caches
        # only texts seen before, and every order id is new) costs four times as much.
        return root.with_path(self._root_path + path, encoded=True)
