"""What keeps one exchange bounded and discreet: its time limit, the answer's size cap, and
transport errors stripped of the request's headers before they are chained to ours.

An attempt's time limit (the client's ``timeout``, from connecting to the last byte of the
answer) is kept by :class:`Deadlines` rather than by aiohttp's total timeout, which starts
and cancels a loop timer of its own for every request (~4 us of a request's ~70 us): here
every attempt due within the same second shares one timer.

An answer is read chunk by chunk as aiohttp decompresses it, so the cap holds on the
decompressed size: a small gzip body that inflates to hundreds of MiB stops at the cap.

aiohttp's exceptions carry what a token must never reach: ``ClientResponseError.request_info``
holds the request's headers (``Authorization`` included), and the frames of their
tracebacks hold the header dicts as locals, which anything that prints locals (pytest
``-l``, error trackers, rich tracebacks) shows. :func:`discreet` drops both before the
exception becomes the ``__cause__`` of ours; its type and message, which the retry rules
read, stay.
"""

from __future__ import annotations

import asyncio
import math
from types import TracebackType
from typing import Final

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "UNTIMED",
    "AnswerTooLarge",
    "Deadlines",
    "discreet",
    "read_capped",
    "read_whole",
]

#: The largest answer read by default: far above any order or quote, far below harm.
DEFAULT_MAX_RESPONSE_BYTES: Final = 16 * 1024 * 1024
_CHUNK = 64 * 1024
_HIDDEN = "***"
#: aiohttp's timeouts, all off: :class:`Deadlines` keeps the attempt's own.
UNTIMED: Final = aiohttp.ClientTimeout()
# Limits of at least this many seconds end on the next whole second of the loop's clock,
# as aiohttp's own do (its ``ceil_threshold``); shorter ones end on time.
_ROUNDED_FROM: Final = 5.0


class Deadlines:
    """The time limits of the attempts of one event loop, on one timer per due second.

    >>> with deadlines.limit(30.0):  # doctest: +SKIP
    ...     answer = await exchange()  # TimeoutError after 30 s (up to 31)

    At its deadline the attempt's task is cancelled and, as :func:`asyncio.timeout` does,
    the cancellation becomes ``TimeoutError`` where it leaves the ``with`` block, unless
    the task was also cancelled from elsewhere: that cancellation goes on.
    """

    __slots__ = ("_due", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        # Deadline (loop time) -> the limits ending then that are still in force.
        self._due: dict[float, set[_Limit]] = {}

    def limit(self, seconds: float) -> _Limit:
        """A context manager ending its block with ``TimeoutError`` after ``seconds``."""
        loop = self._loop
        when = loop.time() + seconds
        if seconds >= _ROUNDED_FROM:
            when = math.ceil(when)
        due = self._due.get(when)
        if due is None:
            due = self._due[when] = set()
            loop.call_at(when, self._expire, when)
        return _Limit(due)

    def _expire(self, when: float) -> None:
        for limit in self._due.pop(when, ()):
            limit.expire()


class _Limit:
    """One attempt's time limit: in its deadline's set while its block runs."""

    __slots__ = ("_cancelling", "_due", "_expired", "_task")

    def __init__(self, due: set[_Limit]) -> None:
        self._due = due
        self._expired = False

    def __enter__(self) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a time limit is kept inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._due.add(self)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._due.discard(self)
        if (
            self._expired
            and self._task.uncancel() <= self._cancelling
            and exc_type is asyncio.CancelledError
        ):
            raise TimeoutError from exc

    def expire(self) -> None:
        self._expired = True
        self._task.cancel()


class AnswerTooLarge(Exception):
    """The answer (decompressed) is longer than the cap; ``size`` is what was seen.

    The caller fills in the answer's ``status`` and (scrubbed) ``headers`` for its error.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.status = 0
        self.headers: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict())
        super().__init__(size)


def read_whole(response: aiohttp.ClientResponse, limit: int) -> bool:
    """Whether ``response.read()`` may read the answer: it declares a length of at most
    ``limit`` bytes and is neither compressed nor chunked, so aiohttp's parser stops
    there. Raises :class:`AnswerTooLarge` for a plain answer that declares more.
    (The caller still checks the length of what it read.)"""
    declared = response.content_length
    if declared is None:
        return False
    headers = response.headers
    if headers.get("Content-Encoding"):
        return False
    if declared > limit:
        raise AnswerTooLarge(declared)
    return "Transfer-Encoding" not in headers


async def read_capped(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The answer's body, or :class:`AnswerTooLarge` once more than ``limit`` bytes came."""
    if read_whole(response, limit) or response.content.at_eof():
        # Whole: read as cheaply as aiohttp reads. At its end already: a client
        # middleware read the answer before us (to log it, say); aiohttp keeps it.
        whole = await response.read()
        if len(whole) > limit:
            raise AnswerTooLarge(len(whole))
        return whole
    body = bytearray()
    async for chunk in response.content.iter_chunked(_CHUNK):
        body += chunk
        if len(body) > limit:
            raise AnswerTooLarge(len(body))
    return bytes(body)


def discreet(error: BaseException) -> BaseException:
    """``error`` and every exception chained to it, without tracebacks or request headers."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        current.__traceback__ = None
        if isinstance(current, aiohttp.ClientResponseError):
            info = current.request_info
            current.request_info = info._replace(headers=_redacted(info.headers))
        pending += [current.__cause__, current.__context__]
    return error


def _redacted(headers: CIMultiDictProxy[str]) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(
        CIMultiDict(
            (name, _HIDDEN if name.lower() in ("authorization", "cookie") else value)
            for name, value in headers.items()
        )
    )
