"""One HTTP exchange with the API: headers, body, status to error, transport errors, logging.

Nothing here retries: :mod:`shipping_async._retry` decides what happens after a failure.
Transport errors are mapped to :class:`~shipping_async.errors.APIConnectionError` and
:class:`~shipping_async.errors.APITimeoutError` raised ``from`` aiohttp's exception, which
is what the retry rules read to tell "never written" from "maybe acted on".
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping
from typing import Final, TypedDict, TypeVar

import aiohttp
import msgspec
from multidict import CIMultiDict, CIMultiDictProxy

from shipping_async._retry import parse_retry_after
from shipping_async._version import __version__
from shipping_async.clock import Clock
from shipping_async.errors import (
    APIConnectionError,
    APIResponseValidationError,
    APITimeoutError,
    RequestValidationError,
    error_for_status,
)
from shipping_async.telemetry.logs import formatter

__all__ = [
    "USER_AGENT",
    "RequestOptions",
    "Secret",
    "configure_logging",
    "exchange",
    "path_id",
    "redact",
]

T = TypeVar("T")

USER_AGENT: Final = f"shipping-async/{__version__}"
LOGGER_NAME: Final = "shipping_async"

_log = logging.getLogger(LOGGER_NAME)
# A library prints nothing unless asked: without this, Python's last-resort handler would
# write our warnings to stderr in an app that configured no logging.
_log.addHandler(logging.NullHandler())
_HANDLER_NAME = "shipping_async.env"


class RequestOptions(TypedDict, total=False):
    """What one call may change: ``timeout`` (seconds per attempt) and ``max_retries``."""

    timeout: float
    max_retries: int


class Secret:
    """A string that never shows itself in ``repr``, ``str`` or a traceback's locals."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret itself, for the one place that must send it."""
        return self._value

    def __repr__(self) -> str:
        return "'***'"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def redact(headers: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``headers`` fit for a log: the Authorization value is hidden."""
    return {
        name: ("Bearer ***" if name.lower() == "authorization" else value)
        for name, value in headers.items()
    }


def configure_logging(level: str | None = None) -> None:
    """Honour ``SHIPPING_LOG=debug|info|warning``: a stderr handler on ``shipping_async``.

    Its lines are JSON objects with ``SHIPPING_LOG_FORMAT=json``
    (:mod:`shipping_async.telemetry.logs`).

    Called by every client; adds the handler once. Without the variable the library only
    logs into whatever handlers the application configured.
    """
    name = (level if level is not None else os.environ.get("SHIPPING_LOG", "")).strip().upper()
    if not name:
        return
    numeric = logging.getLevelName(name)
    if not isinstance(numeric, int):
        return
    _log.setLevel(numeric)
    if any(handler.get_name() == _HANDLER_NAME for handler in _log.handlers):
        return
    handler = logging.StreamHandler()
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    _log.addHandler(handler)


def _headers(token: Secret, *, json: bool) -> dict[str, str]:
    headers = {
        "Authorization": f"Bearer {token.reveal()}",
        "Accept": "application/json",
        "User-Agent": USER_AGENT,
    }
    # Section 5 has every request carry the JSON content type; a multipart body brings
    # its own (with the boundary), which this header must not override.
    if json:
        headers["Content-Type"] = "application/json"
    return headers


async def exchange(
    session: aiohttp.ClientSession,
    *,
    url: str,
    method: str,
    path: str,
    token: Secret,
    parse: Callable[[bytes], T],
    limits: aiohttp.ClientTimeout,
    clock: Clock,
    json_body: bytes | None = None,
    form: Callable[[], aiohttp.FormData] | None = None,
    on_status: Callable[[int], object] | None = None,
) -> T:
    """Send one request and return ``parse(body)`` of a 2xx answer.

    ``on_status`` hears the answer's status as soon as it is read (for the client hooks).

    Raises the status error for 3xx-5xx (built by
    :func:`~shipping_async.errors.error_for_status`), ``APITimeoutError`` or
    ``APIConnectionError`` from aiohttp's exception, and ``APIResponseValidationError``
    when a 2xx body does not parse.
    """
    headers = _headers(token, json=form is None)
    data: bytes | aiohttp.FormData | None = form() if form is not None else json_body
    loop = asyncio.get_running_loop()
    started = loop.time()
    if _log.isEnabledFor(logging.DEBUG):
        size = len(json_body) if json_body is not None else 0
        kind = "multipart" if form is not None else f"{size} bytes"
        _log.debug("-> %s %s %s headers=%s", method, url, kind, redact(headers))
    try:
        async with session.request(
            method,
            url,
            data=data,
            headers=headers,
            timeout=limits,
            allow_redirects=False,
        ) as response:
            status = response.status
            answer_headers = response.headers
            raw = await response.read()
        if on_status is not None:
            on_status(status)
    except TimeoutError as exc:  # asyncio's, aiohttp's ServerTimeoutError and subclasses
        raise APITimeoutError(
            f"{method} {path}: no answer within {limits.total:g} s ({type(exc).__name__})",
            method=method,
            path=path,
        ) from exc
    except aiohttp.ClientError as exc:
        raise APIConnectionError(
            f"{method} {path}: {type(exc).__name__}: {exc}", method=method, path=path
        ) from exc
    _log.debug(
        "<- %s %s %d in %.3f s (%d bytes)", method, url, status, loop.time() - started, len(raw)
    )
    if status >= 300:
        # A proxy or debug page may echo the request headers back: keep the token out of
        # the error's text, body and headers.
        raise error_for_status(
            status,
            _scrub(raw, token),
            method=method,
            path=path,
            retry_after=parse_retry_after(answer_headers.get("Retry-After"), clock.now()),
            headers=_scrub_headers(answer_headers, token),
        )
    try:
        return parse(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
        raise APIResponseValidationError(
            f"{method} {path}: the {status} answer does not decode: {exc}",
            method=method,
            path=path,
            status=status,
            headers=_scrub_headers(answer_headers, token),
            body=_scrub(raw, token),
        ) from exc


def _scrub(raw: bytes, token: Secret) -> bytes:
    secret = token.reveal().encode()
    return raw.replace(secret, b"***") if secret in raw else raw


def _scrub_headers(headers: Mapping[str, str], token: Secret) -> CIMultiDictProxy[str]:
    """The answer's headers for an error: a read-only copy without the token in them."""
    secret = token.reveal()
    return CIMultiDictProxy(
        CIMultiDict((name, value.replace(secret, "***")) for name, value in headers.items())
    )


def path_id(value: int, name: str) -> int:
    """Check an id that goes into a URL path: a positive integer, never text."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise RequestValidationError(name, f"must be a positive integer id, got {value!r}")
    return value
