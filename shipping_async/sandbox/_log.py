"""The request log: one record per API request, with what the sandbox did about it.

Enough to assert "exactly one POST /orders created an order for this customer_reference":
each POST /orders record carries the ``customer_reference`` it sent (when its body could be
read) and the id of the order it created (``None`` when none was).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import msgspec

__all__ = [
    "MAX_LOGGED_BODY",
    "RequestLog",
    "RequestNote",
    "RequestRecord",
    "note",
    "noting",
    "redact",
]

#: Bytes of a request body the log keeps.
MAX_LOGGED_BODY = 64 * 1024

# The note travels in a context variable, not in request storage: the middlewares and the
# handler of one request run in one task, so they all see the same note.
_CURRENT: ContextVar[RequestNote | None] = ContextVar("shipping_sandbox_note", default=None)


@dataclass(slots=True)
class RequestNote:
    """What handlers and middlewares learnt about one request, for its log record."""

    fault: str | None = None
    customer_reference: str | None = None
    order_id: int | None = None
    detail: str | None = None
    account: str | None = None


def note() -> RequestNote:
    """The note of the request being handled (a throwaway one outside the request log)."""
    return _CURRENT.get() or RequestNote()


@contextmanager
def noting() -> Iterator[RequestNote]:
    """Start a fresh note for the request handled inside the ``with`` block."""
    current = RequestNote()
    reset = _CURRENT.set(current)
    try:
        yield current
    finally:
        _CURRENT.reset(reset)


class RequestRecord(msgspec.Struct, kw_only=True):
    """One logged request. ``status`` is ``None`` when the connection was dropped;
    ``account`` is the account whose token it carried."""

    id: int
    method: str
    path: str
    status: int | None
    at: str
    monotonic: float
    fault: str | None = None
    customer_reference: str | None = None
    order_id: int | None = None
    detail: str | None = None
    account: str | None = None
    #: The request's headers, the Authorization value redacted (``Bearer ***``).
    headers: dict[str, str] = {}  # a msgspec Struct copies this default per instance
    #: The request's body (at most ``MAX_LOGGED_BODY`` bytes; ``None`` for multipart).
    body: bytes | None = None


class RequestLog:
    """The latest ``size`` authenticated API requests in arrival order (the control API is
    not logged). A ring buffer: the oldest record goes when a new one comes past ``size``.

    Requests refused with 401 are only counted (:attr:`refused`): anyone can send them,
    so they must not be able to fill the memory of a sandbox.
    """

    __slots__ = ("_next_id", "_records", "refused")

    def __init__(self, size: int = 100_000) -> None:
        self._records: deque[RequestRecord] = deque(maxlen=size)
        self._next_id = 1
        self.refused = 0

    def append(self, record: RequestRecord) -> None:
        record.id = self._next_id
        self._next_id += 1
        self._records.append(record)

    def records(self, *, method: str | None = None, path: str | None = None) -> list[RequestRecord]:
        """The records, optionally only one method and/or one exact path."""
        return [
            record
            for record in self._records
            if (method is None or record.method == method.upper())
            and (path is None or record.path == path)
        ]

    def clear(self) -> None:
        self._records.clear()
        self.refused = 0


def redact(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` for the log: the bearer token replaced by ``***``."""
    return {
        name: ("Bearer ***" if name.lower() == "authorization" else value)
        for name, value in headers.items()
    }
