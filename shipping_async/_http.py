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
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, TypedDict, TypeVar

import aiohttp
import msgspec
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from shipping_async._bounded import (
    DEFAULT_MAX_RESPONSE_BYTES,
    UNTIMED,
    AnswerTooLarge,
    Deadlines,
    discreet,
    read_capped,
    read_whole,
)
from shipping_async._decode import Answer, read_answer
from shipping_async._retry import parse_retry_after
from shipping_async._send_gate import GatedBody, send_gate
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

if TYPE_CHECKING:
    from aiolimiter import AsyncLimiter

__all__ = [
    "USER_AGENT",
    "Exchange",
    "Observer",
    "RequestOptions",
    "Secret",
    "configure_logging",
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
    """A string that never shows itself in ``repr``, ``str`` or a traceback's locals.

    It also keeps what every request and answer needs of the token, made once: the
    request headers that carry it (:meth:`headers`) and its bytes (to scrub answers).
    None of them is ever bound to a name of a frame that may raise.
    """

    __slots__ = ("_bytes", "_form_headers", "_json_headers", "_value")

    def __init__(self, value: str) -> None:
        self._value = value
        self._bytes = value.encode()
        self._json_headers = _headers(self, json=True)
        self._form_headers = _headers(self, json=False)

    def reveal(self) -> str:
        """The secret itself, for the one place that must send it."""
        return self._value

    def headers(self, *, json: bool) -> dict[str, str]:
        """The request headers (token included), the same dict for every request: aiohttp
        copies them into each request's own; nothing may change them."""
        return self._json_headers if json else self._form_headers

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


class Observer(Protocol):
    """Who hears of each attempt of an exchange (the client's hooks)."""

    def sending(self) -> None: ...

    def status(self, status: int) -> None: ...

    def answered(self, error: BaseException | None) -> None: ...


class Exchange(Generic[T]):
    """One request of a call, ready to send: each ``await exchange()`` is one attempt,
    which returns the ``answer`` read from the body of a 2xx answer (strictly, or
    ``lenient``; see :func:`~shipping_async._decode.read_answer`). ``raw_sink`` gets the
    bytes of every answer read (the order ledger keeps them).

    Made once per call (not per attempt). Each attempt may take ``timeout`` seconds, kept
    by ``deadlines``. ``rate`` (an ``aiolimiter.AsyncLimiter``) is
    passed before every attempt; ``observer`` hears each attempt start, its answer's
    status as soon as it is read, and how it ended. ``gated``: an order's attempt, whose
    :class:`~shipping_async._send_gate.SendGate` (in
    :data:`~shipping_async._send_gate.send_gate`) the JSON body opens right before it is
    written (:class:`~shipping_async._send_gate.GatedBody`).

    An attempt raises the status error for 3xx-5xx (built by
    :func:`~shipping_async.errors.error_for_status`), ``APITimeoutError`` or
    ``APIConnectionError`` from aiohttp's exception, and ``APIResponseValidationError``
    when a 2xx body does not parse.
    """

    __slots__ = (
        "answer",
        "clock",
        "deadlines",
        "form",
        "gated",
        "json_body",
        "lenient",
        "max_response_bytes",
        "method",
        "observer",
        "path",
        "rate",
        "raw_sink",
        "session",
        "timeout",
        "token",
        "url",
    )

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        url: str | URL,
        method: str,
        path: str,
        token: Secret,
        answer: Answer[Any, T],
        lenient: bool,
        raw_sink: Callable[[bytes], None] | None = None,
        timeout: float,
        deadlines: Deadlines,
        clock: Clock,
        json_body: bytes | None = None,
        form: Callable[[], aiohttp.FormData] | None = None,
        gated: bool = False,
        observer: Observer | None = None,
        rate: AsyncLimiter | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self.session = session
        self.url = url
        self.method = method
        self.path = path
        self.token = token
        self.answer = answer
        self.lenient = lenient
        self.raw_sink = raw_sink
        self.timeout = timeout
        self.deadlines = deadlines
        self.clock = clock
        self.json_body = json_body
        self.form = form
        self.gated = gated
        self.observer = observer
        self.rate = rate
        self.max_response_bytes = max_response_bytes

    async def __call__(self) -> T:
        # The revealed header dict is never a local of this frame (nor is the token):
        # frames that raise keep their locals, and whatever prints them would print it.
        if self.rate is not None:
            await self.rate.acquire()
        observer = self.observer
        if observer is not None:
            observer.sending()
        method, path, token, form, json_body = (
            self.method,
            self.path,
            self.token,
            self.form,
            self.json_body,
        )
        try:
            data: bytes | aiohttp.FormData | GatedBody | None = (
                form() if form is not None else json_body
            )
            if self.gated and json_body is not None and form is None:
                gate = send_gate.get()
                if gate is not None and gate.at_write:
                    data = GatedBody(json_body, gate)
            debug = _log.isEnabledFor(logging.DEBUG)
            if debug:
                started = asyncio.get_running_loop().time()
                size = len(json_body) if json_body is not None else 0
                kind = "multipart" if form is not None else f"{size} bytes"
                _log.debug(
                    "-> %s %s %s headers=%s",
                    method,
                    self.url,
                    kind,
                    redact(token.headers(json=form is None)),
                )
            try:
                status, answer_headers, raw = await _send(
                    self.session,
                    method,
                    self.url,
                    data=data,
                    token=token,
                    json=form is None,
                    limit=self.deadlines.limit(self.timeout),
                    max_response_bytes=self.max_response_bytes,
                )
                if observer is not None:
                    observer.status(status)
            except AnswerTooLarge as exc:
                raise APIResponseValidationError(
                    f"{method} {path}: the {exc.status} answer is longer than "
                    f"{self.max_response_bytes} bytes (max_response_bytes); it was not read",
                    method=method,
                    path=path,
                    status=exc.status,
                    headers=_scrub_headers(exc.headers, token),
                    body=b"",
                ) from discreet(exc)
            except TimeoutError as exc:  # asyncio's, aiohttp's ServerTimeoutError and subclasses
                raise APITimeoutError(
                    f"{method} {path}: no answer within {self.timeout:g} s ({type(exc).__name__})",
                    method=method,
                    path=path,
                ) from discreet(exc)
            except aiohttp.ClientError as exc:
                raise APIConnectionError(
                    f"{method} {path}: {type(exc).__name__}: {exc}", method=method, path=path
                ) from discreet(exc)
            if debug:  # not even the arguments otherwise: every request
                _log.debug(
                    "<- %s %s %d in %.3f s (%d bytes)",
                    method,
                    self.url,
                    status,
                    asyncio.get_running_loop().time() - started,
                    len(raw),
                )
            if status >= 300:
                # A proxy or debug page may echo the request headers back: keep the token
                # out of the error's text, body and headers.
                raise error_for_status(
                    status,
                    raw,
                    method=method,
                    path=path,
                    retry_after=parse_retry_after(
                        answer_headers.get("Retry-After"), self.clock.now()
                    ),
                    headers=answer_headers,
                )
            try:
                result = read_answer(
                    raw, self.answer, lenient=self.lenient, what=f"{method} {path}"
                )
            except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
                raise APIResponseValidationError(
                    f"{method} {path}: the {status} answer does not decode: {exc}",
                    method=method,
                    path=path,
                    status=status,
                    headers=answer_headers,
                    body=raw,
                ) from exc
            if self.raw_sink is not None:
                self.raw_sink(raw)
        except BaseException as exc:
            if observer is not None:
                observer.answered(exc)
            raise
        if observer is not None:
            observer.answered(None)
        return result


async def _send(
    session: aiohttp.ClientSession,
    method: str,
    url: str | URL,
    *,
    data: bytes | aiohttp.FormData | GatedBody | None,
    token: Secret,
    json: bool,
    limit: AbstractContextManager[None],
    max_response_bytes: int,
) -> tuple[int, CIMultiDictProxy[str], bytes]:
    """The answer's status, headers and body, the token scrubbed from the last two, within
    ``limit`` (the attempt's time limit: ``TimeoutError``).

    A proxy or debug page may echo the request headers back. The answer is scrubbed here,
    before :class:`Exchange` holds it, so that no frame that raises a status or decoding
    error holds the token in its locals; this frame's own locals go with the aiohttp
    exception's traceback, which :func:`~shipping_async._bounded.discreet` drops.
    """
    with limit:
        async with session.request(
            method,
            url,
            data=data,
            headers=token.headers(json=json),
            timeout=UNTIMED,
            allow_redirects=False,
        ) as response:
            try:
                if read_whole(response, max_response_bytes):  # read_capped's way, a call less
                    raw = await response.read()
                    if len(raw) > max_response_bytes:
                        raise AnswerTooLarge(len(raw))
                else:
                    raw = await read_capped(response, max_response_bytes)
            except AnswerTooLarge as exc:
                exc.status = response.status
                exc.headers = _scrub_headers(response.headers, token)
                raise
            # bytes.replace returns the answer itself when the token is not in it.
            return (
                response.status,
                _scrub_headers(response.headers, token),
                raw.replace(token._bytes, b"***"),
            )


# The token is revealed inline, never bound to a name: a traceback that shows frame
# locals (rich, Sentry) must not find it here.


def _scrub_headers(headers: Mapping[str, str], token: Secret) -> CIMultiDictProxy[str]:
    """The answer's headers for an error: read-only, without the token in them (the
    answer's own when none holds it, which is every answer of an honest server)."""
    # One search of the values joined (a header value holds no line break, so a match
    # that spans two values needs a token holding one: then the slow way scrubs right).
    if isinstance(headers, CIMultiDictProxy) and token._value not in "\n".join(headers.values()):
        return headers
    return CIMultiDictProxy(
        CIMultiDict((name, value.replace(token.reveal(), "***")) for name, value in headers.items())
    )


def path_id(value: int, name: str) -> int:
    """Check an id that goes into a URL path: a positive integer, never text."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise RequestValidationError(name, f"must be a positive integer id, got {value!r}")
    return value
