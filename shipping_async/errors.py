"""Every error the SDK raises, under one root, and the table from HTTP status to class.

::

    ShippingError
    ├── ConfigurationError              the client cannot be built as asked (also a ValueError)
    ├── RequestValidationError          a request failed client-side checks (names the field)
    │   └── EstimateExpiredError             the estimate expired while the order waited
    ├── InputFileError                  a file of shipments cannot be read (file, line, field)
    ├── NoPickupWindowError             no offered pickup slot fits the wish (says why)
    ├── LimiterUnavailableError         the shared order limiter is unreachable: nothing sent
    ├── OrderWaitTimeoutError           no order permit within max_wait: not created (TimeoutError)
    └── APIError                        something went wrong talking to the API
        ├── APIStatusError              the API answered with an error status
        │   ├── BadRequestError              400
        │   ├── AuthenticationError          401
        │   ├── NotFoundError                404
        │   ├── UnprocessableEntityError     422 (.messages)
        │   │   ├── NoHubForRouteError            no hub serves the lane: quote direct
        │   │   └── OrderAlreadyLiveError         cancel refused: the order went live
        │   ├── RateLimitError               429 (.count, .limit, .window)
        │   └── InternalServerError          5xx
        ├── APIConnectionError          no usable answer came back
        │   └── APITimeoutError              ... in time (also a TimeoutError)
        ├── APIResponseValidationError  an answer came back that does not decode
        └── OutcomeUnknownError         a non-idempotent request was sent, no usable answer came
            └── OrderOutcomeUnknownError     ... for POST /orders (.customer_reference)

A 5xx to a non-idempotent POST (orders, waybills, pickups, webhooks) is raised as an error
that is both ``InternalServerError`` and ``OutcomeUnknownError`` (``OrderOutcomeUnknownError``
for POST /orders): behind a gateway a 502 often follows work that was done. A 2xx whose
identity cannot be read is both ``APIResponseValidationError`` and ``OutcomeUnknownError``.
Each keeps the answer (``status``, ``headers``, ``body``); see :func:`outcome_unknown`.

No error text ever contains the access token: messages are built from the method, the
path, the status and the API's own error text only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import msgspec

from shipping_async._escape import cut, escape_controls

__all__ = [
    "APIConnectionError",
    "APIError",
    "APIResponseValidationError",
    "APIStatusError",
    "APITimeoutError",
    "AuthenticationError",
    "BadRequestError",
    "ConfigurationError",
    "EstimateExpiredError",
    "InputFileError",
    "InternalServerError",
    "LimiterUnavailableError",
    "NoHubForRouteError",
    "NoPickupWindowError",
    "NotFoundError",
    "OrderAlreadyLiveError",
    "OrderOutcomeUnknownError",
    "OrderWaitTimeoutError",
    "OutcomeUnknownError",
    "RateLimitError",
    "RateLimitInfo",
    "RequestValidationError",
    "ShippingError",
    "UnprocessableEntityError",
    "error_for_status",
    "parse_rate_limit",
]


class ShippingError(Exception):
    """Root of every error raised by shipping-async."""


class ConfigurationError(ShippingError, ValueError):
    """The client's options are unusable: no token, no base URL, plain http to a remote host."""


class RequestValidationError(ShippingError, ValueError):
    """A request was refused before sending, naming every bad value.

    ``problems`` lists each ``(field, reason)`` pair found (``field`` is the value's path,
    ``packages[2].width``); ``field`` and ``reason`` are the first of them.
    """

    def __init__(
        self, field: str, reason: str, *, problems: list[tuple[str, str]] | None = None
    ) -> None:
        self.problems = problems if problems else [(field, reason)]
        self.field, self.reason = self.problems[0]
        super().__init__("; ".join(f"{name}: {why}" for name, why in self.problems))


class InputFileError(ShippingError, ValueError):
    """A file of shipments cannot be read as a whole: ``path``, ``line`` and ``field`` say where.

    A row that reads but does not make a valid shipment is not this error: it becomes a
    failed result of its own and the other rows go on. This one is for what stops the
    reading itself: bytes that are not UTF-8, a CSV field over the size limit, a line over
    the length limit.
    """

    def __init__(self, path: str, line: int, reason: str, *, field: str | None = None) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.reason = reason
        where = f" field {field}:" if field else ""
        super().__init__(f"{path}:{line}:{where} {reason}")


class EstimateExpiredError(RequestValidationError):
    """The order's estimate expired while the order waited for its permit: not sent.

    ``orders.create`` re-checks the estimate (``GET /quotes/{id}``) after a long wait and
    raises this instead of sending an order the API would refuse. Quote again.
    """

    def __init__(self, estimate_id: int, reason: str) -> None:
        self.estimate_id = estimate_id
        super().__init__("quote_estimate_id", reason)


class NoPickupWindowError(ShippingError):
    """None of the offered pickup slots can hold the requested window; ``reasons`` says why."""

    def __init__(self, message: str, reasons: list[str] | None = None) -> None:
        self.reasons = reasons or []
        super().__init__(message)


class LimiterUnavailableError(ShippingError):
    """The shared order limiter could not be reached, so no order was sent.

    Raised by :meth:`~shipping_async.scaleout.redis_limiter.RedisOrderLimiter.acquire`
    only when ``max_outage`` is set and Redis stayed unreachable that long. Nothing was
    sent; retrying later is safe.
    """


class OrderWaitTimeoutError(ShippingError, TimeoutError):
    """No order permit came within ``max_wait``: the order was not created.

    ``sent`` is ``False`` when no request for it reached the server at all; ``True`` only
    when every attempt that did was refused with a 429 (so nothing was created either).
    ``expected_wait``: the seconds the limiter still expected at the bound (``None``
    when unknown). Retrying later is safe.
    """

    def __init__(
        self,
        message: str,
        *,
        customer_reference: str | None,
        max_wait: float,
        expected_wait: float | None,
        sent: bool = False,
    ) -> None:
        self.customer_reference = customer_reference
        self.max_wait = max_wait
        self.expected_wait = expected_wait
        self.sent = sent
        super().__init__(message)


class APIError(ShippingError):
    """A request to the API failed. ``method`` and ``path`` say which one."""

    def __init__(self, message: str, *, method: str = "", path: str = "") -> None:
        self.method = method
        self.path = path
        super().__init__(message)


class _ErrorBody(msgspec.Struct):
    success: bool | None = None
    error: Any = None
    errors: Any = None


_NO_HEADERS: Mapping[str, str] = MappingProxyType({})


class APIStatusError(APIError):
    """The API answered with an error status: the whole answer comes with the error.

    ``status``, ``headers`` (the response's, case-insensitive when they came from the
    wire; never the request's, which carry the token) and ``body`` (raw bytes) are the
    answer; ``error`` and ``errors`` are the API's texts read from the body. The message
    quotes ``error`` with its control characters escaped, cut after
    :data:`MAX_QUOTED_CHARS`: it ends up in logs and terminals, and a server can say anything.
    """

    status_code: ClassVar[int | None] = None

    def __init__(
        self,
        *,
        status: int,
        error: str,
        errors: list[Any],
        body: bytes,
        method: str,
        path: str,
        retry_after: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.status = status
        self.error = error
        self.errors = errors
        self.body = body
        self.headers: Mapping[str, str] = _NO_HEADERS if headers is None else headers
        self.retry_after = retry_after
        detail = f": {_quoted(error)}" if error else ""
        super().__init__(f"{status} on {method} {path}{detail}", method=method, path=path)


#: An API's text is cut there in an error's message (``error`` and ``body`` keep it whole).
MAX_QUOTED_CHARS = 1_000


def _quoted(text: str) -> str:
    """An API's text as an error's message quotes it: control characters escaped, so that
    an application's own log or terminal shows it as it is, and cut, as any length comes."""
    return cut(escape_controls(text), MAX_QUOTED_CHARS)


class BadRequestError(APIStatusError):
    """400: the API found the request invalid (it never says which field)."""

    status_code = 400


class AuthenticationError(APIStatusError):
    """401: the access token is missing or invalid. Check SHIPPING_ACCESS_TOKEN."""

    status_code = 401


class NotFoundError(APIStatusError):
    """404: no such order, quote or webhook endpoint."""

    status_code = 404


class UnprocessableEntityError(APIStatusError):
    """422: the request was understood but refused. ``messages`` holds the API's texts.

    The API puts a JSON array inside the ``error`` string (``'["Target url is invalid"]'``);
    ``messages`` is that array parsed, or the plain text as a one-item list.
    """

    status_code = 422

    @property
    def messages(self) -> list[str]:
        try:
            parsed = json.loads(self.error)
        except (TypeError, ValueError):
            return [self.error] if self.error else []
        if isinstance(parsed, list):
            return [str(item) for item in parsed]
        return [str(parsed)]


class NoHubForRouteError(UnprocessableEntityError):
    """422 on a hub quote: no hub serves this lane. Repeat the quote as a direct quote."""


class OrderAlreadyLiveError(UnprocessableEntityError):
    """422 on cancel: the order is in transit or later and can no longer be cancelled."""


class RateLimitInfo(msgspec.Struct, frozen=True):
    """What a 429 text says: ``count`` of ``limit`` orders used in ``window`` seconds."""

    count: int | None
    limit: int | None
    window: float | None


_RATE_TEXT = re.compile(
    r"(?P<count>\d+)\s*(?:of|/|out\s+of)\s*(?P<limit>\d+)"
    r"(?:\s*(?:requests?|orders?|calls?))?"
    r"(?:\s*(?:in|per|within|every)\s*(?:the\s+last\s+)?(?P<window>\d+(?:\.\d+)?)?\s*"
    r"(?P<unit>milliseconds?|ms|seconds?|secs?|s|minutes?|mins?|m|hours?|h)?\b)?",
    re.IGNORECASE,
)
# Longest prefixes first: "ms" and "millisecond" before "m", "min" before "m".
_UNIT_SECONDS = (("ms", 0.001), ("millisecond", 0.001), ("h", 3600.0), ("m", 60.0), ("s", 1.0))


def parse_rate_limit(text: str) -> RateLimitInfo:
    """Read ``20 of 20 in 60 seconds`` (and looser wordings) out of a 429 text.

    >>> parse_rate_limit("20 of 20 in 0.6 seconds").window
    0.6

    Parts that cannot be read come back as ``None``; the caller falls back to its
    configuration for them.
    """
    match = _RATE_TEXT.search(text or "")
    if match is None:
        return RateLimitInfo(count=None, limit=None, window=None)
    window: float | None = None
    # "per minute" names a unit without a number: one of it.
    if match["window"] is not None or match["unit"] is not None:
        unit = (match["unit"] or "s").lower()
        scale = next(seconds for prefix, seconds in _UNIT_SECONDS if unit.startswith(prefix))
        window = float(match["window"] or 1) * scale
    return RateLimitInfo(count=int(match["count"]), limit=int(match["limit"]), window=window)


class RateLimitError(APIStatusError):
    """429 on POST /orders: the account's order budget is used up for now.

    ``count``, ``limit`` and ``window`` (seconds) are read from the API's text; any of
    them is ``None`` when the text did not say.
    """

    status_code = 429

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        info = parse_rate_limit(self.error)
        self.count = info.count
        self.limit = info.limit
        self.window = info.window


class InternalServerError(APIStatusError):
    """5xx: the API failed on its side; idempotent requests are retried automatically."""


class APIConnectionError(APIError):
    """The request got no usable answer (connection refused, reset, DNS, TLS)."""


class APITimeoutError(APIConnectionError, TimeoutError):
    """The request got no answer within the timeout."""


class APIResponseValidationError(APIError):
    """The API answered, but the body does not decode into the documented shape.

    ``status``, ``headers`` and ``body`` are that answer (``None``/empty when unknown).
    """

    def __init__(
        self,
        message: str,
        *,
        method: str = "",
        path: str = "",
        status: int | None = None,
        headers: Mapping[str, str] | None = None,
        body: bytes = b"",
    ) -> None:
        self.status = status
        self.headers: Mapping[str, str] = _NO_HEADERS if headers is None else headers
        self.body = body
        super().__init__(message, method=method, path=path)


class OutcomeUnknownError(APIError):
    """A non-idempotent request was written but no answer came back.

    The server may or may not have acted, so the SDK does not re-send it (that could do
    the work twice). Check the state (e.g. GET the order) before trying again.
    """

    def __init__(self, message: str, *, method: str, path: str, operation: str) -> None:
        self.operation = operation
        super().__init__(message, method=method, path=path)


class OrderOutcomeUnknownError(OutcomeUnknownError):
    """POST /orders was sent and no answer came: the order may exist.

    ``customer_reference`` identifies it for reconciliation; do not re-send blindly.
    """

    def __init__(self, message: str, *, method: str, path: str, customer_reference: str) -> None:
        self.customer_reference = customer_reference
        super().__init__(message, method=method, path=path, operation="create_order")


class _UnknownAfterServerError(InternalServerError, OutcomeUnknownError):
    """A 5xx answered a non-idempotent POST: the server may have acted before failing."""


class _OrderUnknownAfterServerError(InternalServerError, OrderOutcomeUnknownError):
    """A 5xx answered POST /orders: behind a gateway the order may well exist."""


class _UnknownAfterUnreadableAnswer(APIResponseValidationError, OutcomeUnknownError):
    """A 2xx answered a non-idempotent POST, but what it did cannot be read from it."""


class _OrderUnknownAfterUnreadableAnswer(APIResponseValidationError, OrderOutcomeUnknownError):
    """POST /orders was answered 2xx, but the order's id cannot be read from the answer."""


# The error the outcome is unknown after -> the classes that are both (plain, order).
_UNKNOWN_AFTER: tuple[
    tuple[type[APIError], type[OutcomeUnknownError], type[OrderOutcomeUnknownError]], ...
] = (
    (InternalServerError, _UnknownAfterServerError, _OrderUnknownAfterServerError),
    (
        APIResponseValidationError,
        _UnknownAfterUnreadableAnswer,
        _OrderUnknownAfterUnreadableAnswer,
    ),
)


def outcome_unknown(
    message: str, *, cause: APIError, operation: str, customer_reference: str | None = None
) -> OutcomeUnknownError:
    """The outcome-unknown error for ``cause`` (raised ``from`` it).

    After a 5xx or an unreadable 2xx the error is also of the cause's class, with its
    answer (``status``, ``headers``, ``body``), so ``except InternalServerError`` keeps
    catching a 502 to POST /orders; ``customer_reference`` makes it an
    :class:`OrderOutcomeUnknownError`.
    """
    plain: type[OutcomeUnknownError] = OutcomeUnknownError
    order: type[OrderOutcomeUnknownError] = OrderOutcomeUnknownError
    for kind, plain_kind, order_kind in _UNKNOWN_AFTER:
        if isinstance(cause, kind):
            plain, order = plain_kind, order_kind
            break
    cls = plain if customer_reference is None else order
    error = cls.__new__(cls)
    if plain is not OutcomeUnknownError:
        # The answer's facts, whatever the cause's class keeps (status, headers, body...).
        error.__dict__.update(vars(cause))
    Exception.__init__(error, message)
    error.method, error.path = cause.method, cause.path
    error.operation = operation if customer_reference is None else "create_order"
    if isinstance(error, OrderOutcomeUnknownError):
        assert customer_reference is not None
        error.customer_reference = customer_reference
    error.__cause__ = cause
    return error


_STATUS_ERRORS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    404: NotFoundError,
    422: UnprocessableEntityError,
    429: RateLimitError,
}

# Specific 422s are told apart by the API's own texts (section 7 of the spec).
_UNPROCESSABLE_BY_TEXT: tuple[tuple[str, type[UnprocessableEntityError]], ...] = (
    ("no hub is available", NoHubForRouteError),
    ("already gone live", OrderAlreadyLiveError),
)


def error_for_status(
    status: int,
    body: bytes,
    *,
    method: str,
    path: str,
    retry_after: float | None = None,
    headers: Mapping[str, str] | None = None,
) -> APIStatusError:
    """Build the error for an error response: the class comes from the status table.

    ``headers`` are the response's, kept on the error as they came.
    """
    try:
        parsed = msgspec.json.decode(body, type=_ErrorBody)
    except msgspec.DecodeError:
        parsed = _ErrorBody(error=body[:500].decode("utf-8", "replace").strip())
    error = parsed.error if isinstance(parsed.error, str) else ""
    if parsed.error is not None and not isinstance(parsed.error, str):
        error = json.dumps(parsed.error)
    errors = parsed.errors if isinstance(parsed.errors, list) else []
    cls = _STATUS_ERRORS.get(status)
    if cls is None:
        cls = InternalServerError if status >= 500 else APIStatusError
    if cls is UnprocessableEntityError:
        lowered = error.lower()
        for needle, specific in _UNPROCESSABLE_BY_TEXT:
            if needle in lowered:
                cls = specific
                break
    return cls(
        status=status,
        error=error,
        errors=errors,
        body=body,
        method=method,
        path=path,
        retry_after=retry_after,
        headers=headers,
    )
